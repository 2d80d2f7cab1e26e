"""Where a GEMM region reads its rows from and writes its output to, when neither is a plain (row, column) grid.

nn.MultiheadAttention's input projection is the common case: x (B, S, E) is transposed to (S, B, E) and copied
before the GEMM, and the product (S*B, 3E) plus its bias is viewed as (S, B, 3, E), transposed and copied to
(3, S, B, E) after it. Inductor's float32 template reads and writes through those index maps on the CUDA cores;
the GEMM engine's tensor-core tile (tf32x3) wants A by TMA, rows at one step. Since a GEMM's rows are independent:
  - `rows_in_storage_order` takes A's rows in the order the input stores them (row q of the tile is row perm[q]
    of the region's product), so A is one strided (M, K) view again;
  - `output_offsets` finds, for the views that reorder the product after the epilogue, where element (q, n) of
    the tile lands in the region's contiguous output: a row part plus a column part, each a sum of mixed-radix
    digits (`mixed_radix`), which the tile kernel computes from its row and column indices (`expression`).
A layout neither describes keeps the region on Inductor's starter (Unsupported says why).
"""

from __future__ import annotations

import math

import torch

from autokernel.profile.regions.epilogue_ops import Unsupported

MAX_MAPPED = 1 << 26        # elements of an output whose index map is built (as int64 on the CPU: 512 MiB)


def rows_in_storage_order(offsets: torch.Tensor) -> tuple[int, tuple[int, int], torch.Tensor] | None:
    """For A's element offsets (M, K) whose rows are each read at one step along K and whose row starts are the
    rows of a strided view in some order: (offset, (row step, k step), perm), row q of that view being row
    perm[q] of A. None where the rows are not such a permutation."""
    rows, cols = offsets.shape
    starts = offsets[:, 0]
    k_step = int(offsets[0, 1] - offsets[0, 0]) if cols > 1 else 1
    if not torch.equal(offsets, starts[:, None] + torch.arange(cols)[None, :] * k_step):
        return None
    perm = torch.argsort(starts, stable=True)
    ordered = starts[perm]
    row_step = int(ordered[1] - ordered[0]) if rows > 1 else cols * k_step
    if row_step <= 0 or not torch.equal(ordered, ordered[0] + torch.arange(rows) * row_step):
        return None
    return int(ordered[0]), (row_step, k_step), perm


def output_offsets(positions: torch.Tensor, perm: torch.Tensor | None) -> tuple[int, list, list]:
    """positions (M, N): where element (r, n) of the product lands in the contiguous output. Returns (base, row
    digits, column digits) with positions[perm[q], n] = base + rows(q) + columns(n); Unsupported if not so."""
    if perm is not None:
        positions = positions[perm]
    base = int(positions[0, 0])
    rows, cols = positions[:, 0] - base, positions[0, :] - base
    if not torch.equal(positions, base + rows[:, None] + cols[None, :]):
        raise Unsupported("the output's layout mixes the product's rows and columns")
    row_digits, col_digits = mixed_radix(rows), mixed_radix(cols)
    if row_digits is None or col_digits is None:
        raise Unsupported("the output's layout is not one of reshapes and transposes")
    return base, row_digits, col_digits


def rows_put_back(perm: torch.Tensor, n: int) -> tuple[int, list, list]:
    """output_offsets for a row-major (M, n) output whose row q of the tile is row perm[q] (no (M, n) map built)."""
    base = int(perm[0]) * n
    row_digits = mixed_radix(perm * n - base)
    if row_digits is None:
        raise Unsupported("the rows' order is not one of reshapes and transposes")
    return base, row_digits, [(1, n, 1)]


def mixed_radix(values: torch.Tensor) -> list[tuple[int, int, int]] | None:
    """Digits (p, d, s) with values[i] = sum of ((i // p) % d) * s over them (values[0] is 0), found level by level
    as runs of one step, or None where values are not of that form. A reshape's dims are the radices and a
    transpose's strides the steps, so any chain of them gives such values."""
    digits, period, level = [], 1, values
    while len(level) > 1:
        step = int(level[1] - level[0])
        run = 2
        while run < len(level) and int(level[run] - level[0]) == run * step:
            run += 1
        while len(level) % run:            # a radix divides what is left; a run longer by chance is cut back
            run -= 1
        if run == 1:
            return None
        if step:
            digits.append((period, run, step))
        period *= run
        level = level[::run] - level[0]
    index = torch.arange(len(values))
    rebuilt = sum((((index // p) % d) * s for p, d, s in digits), torch.zeros_like(index))
    return digits if torch.equal(rebuilt, values) else None


def expression(digits: list[tuple[int, int, int]], index: str, count: int) -> str:
    """Triton for sum of ((index // p) % d) * s over the digits, for index < count (zeros shaped as the index
    for none: a single row or column, which the tile kernel still indexes as a vector)."""
    terms = []
    for p, d, s in digits:
        digit = index if p == 1 else f"({index} // {p})"
        if p * d < count:
            digit = f"({digit} % {d})"
        terms.append(digit if s == 1 else f"{digit} * {s}")
    return " + ".join(terms) or f"{index} * 0"


def reorder_positions(chain: list, start_shape: list[int], replay) -> torch.Tensor:
    """positions (M*N flat, in the product's order) of each element after the views in `chain` reorder it:
    replay(node, tensor) runs one view node on a tensor; the result must come out contiguous, as the output the
    tile kernel writes is."""
    numel = math.prod(start_shape)
    if numel > MAX_MAPPED:
        raise Unsupported(f"an output of {numel} elements reordered (mapped up to {MAX_MAPPED})")
    mapped = torch.arange(numel).view(start_shape)
    for node in chain:
        mapped = replay(node, mapped)
    if mapped.numel() != numel or not torch.equal(torch.sort(mapped.reshape(-1)).values, torch.arange(numel)):
        raise Unsupported("views that drop or repeat the product's elements")        # each must land once
    if not mapped.is_contiguous():
        raise Unsupported("an output left as a reordering view (not copied contiguous)")
    positions = torch.empty(numel, dtype=torch.int64)
    positions[mapped.reshape(-1)] = torch.arange(numel)
    return positions
