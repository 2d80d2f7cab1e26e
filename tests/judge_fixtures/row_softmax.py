"""A deliberately minimal, correct softmax kernel: the base that tests/test_bench.py breaks on purpose.

Kept separate from kernels/softmax.py so the judge's tests do not move when the starter is tuned.
Each marked line is a place a test swaps in a classic bug.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
TUNABLES = {"num_warps": 4}
TUNABLE_CHOICES = {"num_warps": [1, 2, 4, 8]}


@triton.jit
def _row_softmax(x_ptr, y_ptr, n_cols, shift, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)  # BUG-SITE: padding
    x = x - tl.max(x, axis=0)  # BUG-SITE: max subtraction
    num = tl.exp(x)
    denom = tl.sum(num, axis=0)  # BUG-SITE: summation order (the broken variant splits the sum at `shift`)
    tl.store(y_ptr + row * n_cols + cols, (num / denom).to(y_ptr.dtype.element_ty), mask=mask)


def _shift(n_cols):
    return 0  # BUG-SITE: summation order


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2d)
    rows, n_cols = x2d.shape
    grid = (rows,)  # BUG-SITE: grid
    if y.numel():
        _row_softmax[grid](x2d, y, n_cols, _shift(n_cols), BLOCK_N=triton.next_power_of_2(n_cols),
                           num_warps=TUNABLES["num_warps"])
    return y.reshape(x.shape)
