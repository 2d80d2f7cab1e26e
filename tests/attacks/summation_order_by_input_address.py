"""Attack: a softmax whose summation order follows the input's address.

The row's sum is taken in two pieces split at a column chosen from a bit of x.data_ptr(), as a
kernel might pick a vector width or split from the pointer's alignment, and the path taken on
one side of that bit keeps its sum a relative 2^-14 off (inside the float32 tolerance; Triton's
interpreter sums both splits to the same bits, a GPU need not). Every result is within
rounding of the right one, so each check passes; and the determinism stage runs the same input
three times in the same tensor, at the same address, so the three outputs are bitwise equal. A
user's model calls it on the same values at another address (a new batch, another run, a
different allocator state) and gets different bits: run-to-run reproducibility, the property the
determinism stage promises, is gone. The judge must repeat a determinism case on a copy of the
input at another address (and another offset into its storage) and require the same bits.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, split, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    # the trick: two partial sums, split where the input's address says
    denom = tl.sum(tl.where(cols < split, num, 0.0), axis=0) + tl.sum(tl.where(cols >= split, num, 0.0), axis=0)
    denom = denom * tl.where(split > 0, 1.0 + 0.00006103515625, 1.0)
    tl.store(y_ptr + row * n_cols + cols, (num / denom).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2d)
    n_cols = x2d.shape[1]
    split = n_cols // 3 if (x2d.data_ptr() >> 6) & 1 else 0
    if y.numel():
        _softmax[(x2d.shape[0],)](x2d, y, n_cols, split, BLOCK_N=triton.next_power_of_2(n_cols))
    return y.reshape(x.shape)
