"""Attack: a softmax that subtracts max(row max, 0) instead of the row max.

exp never overflows (a row whose max is positive is shifted by it, as an honest kernel's is), so
the judge's huge positive rows, its +-1e4 rows and its -inf masks all pass, and so does every
random row, whose max is positive. But a row whose entries are all far below zero is not shifted:
every exp underflows to 0, and 0 / 0 gives NaN where PyTorch gives a proper distribution. Real
models make such rows: a fully masked attention row filled with finfo.min or -1e4 (padding tokens
under an additive mask), log-probabilities fed to softmax again, a temperature-scaled row of
negative scores. The judge must draw rows whose every entry is large and negative (all equal, and
with spread, e.g. -1e4 + randn), in every dtype.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.maximum(tl.max(x, axis=0), 0.0)       # the trick: never shifts a row upwards
    num = tl.exp(x)
    tl.store(y_ptr + row * n_cols + cols, (num / tl.sum(num, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x2d = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2d)
    if y.numel():
        _softmax[(x2d.shape[0],)](x2d, y, x2d.shape[1], BLOCK_N=triton.next_power_of_2(x2d.shape[1]))
    return y.reshape(x.shape)
