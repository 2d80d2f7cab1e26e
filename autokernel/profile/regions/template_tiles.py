"""A template's tile sizes as launch parameters of a region's starter, so that TUNABLES can move them.

Inductor's GEMM and convolution templates fix their tiles (BLOCK_M, BLOCK_N, BLOCK_K...) as constants
in the kernel's body and launch it on a grid those tiles make. Where that grid is the one this module
knows, `lift` makes the tiles tl.constexpr parameters, and `grid` writes the launch grid from TUNABLES:
  - a GEMM: cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs first. EVEN_K stays as Inductor decided it:
    where it is True the loads along K have no mask, so BLOCK_K may only take sizes that divide K;
  - a convolution: cdiv(BATCH * OUT_D * OUT_H * OUT_W, BLOCK_M) programs, cdiv(OUT_C, BLOCK_N), then the
    groups; every load and store is masked, so any tile tl.dot takes (16 and up) computes the same.
A template whose grid is another is left as Inductor wrote it.
"""

from __future__ import annotations

import triton

from autokernel.profile.regions.starter_code import Kernel

GEMM_BLOCKS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")
CONV_BLOCKS = ("BLOCK_M", "BLOCK_N", "BLOCK_K")
CHOICES = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [16, 32, 64, 128, 256], "BLOCK_K": [16, 32, 64, 128],
           "GROUP_M": [1, 4, 8, 16]}
_CONV_OUTPUT = ("BATCH", "OUT_D", "OUT_H", "OUT_W")


def _is_conv(kernel: Kernel) -> bool:
    return "KERNEL_W" in kernel.body_constexprs and "GROUPS" in kernel.body_constexprs


def blocks(kernel: Kernel) -> tuple[str, ...]:
    """The tiles a template of this kind has."""
    return CONV_BLOCKS if _is_conv(kernel) else GEMM_BLOCKS


def _programs(kernel: Kernel, body: dict) -> list[int] | None:
    """The grid's leading sides Inductor computed from the tiles in `body`, or None where the sizes are unknown."""
    sizes = kernel.fixed_numel
    if _is_conv(kernel):
        if not all(name in sizes for name in ("BATCH", "OUT_H", "OUT_W", "OUT_C")):
            return None
        rows = 1
        for name in _CONV_OUTPUT:
            rows *= sizes.get(name, 1)
        return [triton.cdiv(rows, body["BLOCK_M"]), triton.cdiv(sizes["OUT_C"], body["BLOCK_N"])]
    if not all(n in sizes for n in "MNK") or "EVEN_K" not in body:
        return None
    return [triton.cdiv(sizes["M"], body["BLOCK_M"]) * triton.cdiv(sizes["N"], body["BLOCK_N"])]


def lift(kernel: Kernel, grid: list[str]) -> bool:
    """Make the template's tiles launch parameters where its fixed grid is the known one; False (left as Inductor
    wrote it) otherwise."""
    names, body = blocks(kernel), kernel.body_constexprs
    if not all(name in body for name in names):
        return False
    expected = _programs(kernel, body)
    try:
        if expected is None or [int(side) for side in grid[:len(expected)]] != expected:
            return False
    except ValueError:
        return False
    lines = [line for line in kernel.source.splitlines()
             if not any(line.strip().startswith(f"{name} :") or line.strip().startswith(f"{name}:") for name in names)]
    added = ", ".join(f"{name}: tl.constexpr" for name in names)
    lines[0] = lines[0].replace("):", f", {added}):", 1)
    kernel.source = "\n".join(lines)
    kernel.parameters += list(names)
    kernel.constexprs += list(names)
    return True


def lifted(kernel: Kernel) -> bool:
    return "BLOCK_M" in kernel.constexprs


def grid(kernel: Kernel, fixed: list[str], short: str) -> list[str]:
    """A lifted template's launch grid, its sides written from TUNABLES."""
    sizes = kernel.fixed_numel

    def tile(name: str) -> str:
        return f"TUNABLES[{f'{short}_{name}'!r}]"

    if _is_conv(kernel):
        rows = " * ".join(str(sizes[name]) for name in _CONV_OUTPUT if name in sizes)
        return [f"triton.cdiv({rows}, {tile('BLOCK_M')})", f"triton.cdiv({sizes['OUT_C']}, {tile('BLOCK_N')})",
                *fixed[2:]]
    return [f"triton.cdiv({sizes['M']}, {tile('BLOCK_M')}) * triton.cdiv({sizes['N']}, {tile('BLOCK_N')})", *fixed[1:]]


def choices(kernel: Kernel, name: str) -> list[int]:
    """The sizes a lifted tile may take; a GEMM's BLOCK_K only divisors of K where its loads along K are unmasked."""
    if name == "BLOCK_K" and not _is_conv(kernel) and kernel.body_constexprs.get("EVEN_K"):
        return [size for size in CHOICES[name] if kernel.fixed_numel["K"] % size == 0] or \
            [kernel.body_constexprs["BLOCK_K"]]
    return CHOICES[name]
