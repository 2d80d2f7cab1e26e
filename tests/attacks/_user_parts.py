"""Shared parts of the attacks on the user's process (loaded with runpy; not an attack itself).

`softmax` is a correct Triton softmax over the last dimension with the knobs these attacks turn: how
many rows it launches (a grid capped at a power of two), whether it divides by the row's sum (a kernel
that is wrong on every input when it does not), and where it writes (a buffer of the kernel's own, or
a tensor the caller gave it earlier). Every number comes from the Triton kernel: no PyTorch compute.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, NORMALIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    if NORMALIZE:
        num = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * n_cols + cols, num.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x, *, normalize=True, max_rows=None, out=None):
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2d) if out is None else out.view(x2d.shape)
    rows = x2d.shape[0] if max_rows is None else min(x2d.shape[0], max_rows)
    if rows and x2d.shape[1]:
        _softmax_rows[(rows,)](x2d, y, x2d.shape[1], NORMALIZE=normalize,
                               BLOCK_N=triton.next_power_of_2(x2d.shape[1]))
    return y.view(x.shape)
