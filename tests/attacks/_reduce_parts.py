"""Shared parts of the reduce attack kernels (loaded with runpy; not an attack itself).

honest_kernel_fn is the reduce starter (kernels/reduce.py); kernel_fn_changing_pairs makes a kernel_fn
of it that changes only its (values, indices) pairs. sloppy_indices computes torch.max /
torch.min(x, dim)'s indices in a Triton kernel of its own, one line at a time down the reduced
dim: with every flag off it is right; each flag is a classic way to be right only on friendly
data (distinct, finite values).
"""

import math
import runpy
from pathlib import Path

import torch
import triton
import triton.language as tl

honest_kernel_fn = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "reduce.py"))["kernel_fn"]


@triton.jit
def _walk_down_r(x_ptr, index_ptr, n_lines, n_reduce, n_inner, NEGATE: tl.constexpr, LAST_OF_TIES: tl.constexpr,
                 SKIP_NAN: tl.constexpr, START: tl.constexpr, BLOCK: tl.constexpr):
    # BLOCK lines of x viewed as (O, R, I) to a program, each walked element by element down R.
    lines = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = lines < n_lines
    starts = x_ptr + (lines // n_inner) * n_reduce * n_inner + lines % n_inner
    best = tl.full([BLOCK], -float("inf"), tl.float32)
    index = tl.full([BLOCK], START, tl.int64)
    for r in range(0, n_reduce):
        x = tl.load(starts + r * n_inner, mask=mask, other=0.0).to(tl.float32)
        if NEGATE:
            x = -x
        if LAST_OF_TIES:
            better = x >= best
        else:
            better = x > best
        if not SKIP_NAN:
            better = better | ((x != x) & (best == best))
        best = tl.where(better, x, best)
        index = tl.where(better, r, index)
    tl.store(index_ptr + lines, index, mask=mask)


def sloppy_indices(x: torch.Tensor, dim: int, op: str, last_of_ties=False, skip_nan=False, start=0) -> torch.Tensor:
    dim %= x.dim()
    outer, reduced, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
    indices = torch.empty(x.shape[:dim] + x.shape[dim + 1:], dtype=torch.int64, device=x.device)
    _walk_down_r[(triton.cdiv(outer * inner, 64),)](x.contiguous(), indices, outer * inner, reduced, inner,
                                                    NEGATE=op == "min_dim", LAST_OF_TIES=last_of_ties,
                                                    SKIP_NAN=skip_nan, START=start, BLOCK=64)
    return indices


def kernel_fn_changing_pairs(change):
    """A reduce kernel_fn: the starter's, but for max_dim and min_dim what change(x, dim, op, values, indices)
    makes of the starter's pair."""
    def kernel_fn(x, dim=-1, op="sum"):
        out = honest_kernel_fn(x, dim, op)
        return change(x, dim, op, *out) if op in ("max_dim", "min_dim") else out
    return kernel_fn


def kernel_fn_with_sloppy_indices(**flags):
    """A reduce kernel_fn: the starter's, but for max_dim and min_dim its values with sloppy_indices(**flags)."""
    return kernel_fn_changing_pairs(lambda x, dim, op, values, _: (values, sloppy_indices(x, dim, op, **flags)))
