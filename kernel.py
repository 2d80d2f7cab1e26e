"""Softmax starter: softmax over the last dimension, one row per program, in Triton.

Rows that fit in one block are read once and written once. Longer rows take two passes with an
online (running max, running sum) softmax, so any row length works without running out of
registers.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
TUNABLES = {"MAX_BLOCK_N": 16384, "num_warps": 8, "num_stages": 1}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"MAX_BLOCK_N": [1024, 2048, 4096, 8192, 16384, 32768],
                   "num_warps": [1, 2, 4, 8, 16, 32], "num_stages": [1, 2, 3]}


@triton.jit
def _softmax_one_block(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    running_max = tl.full([BLOCK_N], -float("inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(running_max, x)
        # Lanes that have seen only -inf keep a zero sum instead of exp(-inf - -inf) = nan.
        rescale = tl.where(new_max == -float("inf"), 0.0, tl.exp(running_max - new_max))
        running_sum = running_sum * rescale + tl.where(new_max == -float("inf"), 0.0, tl.exp(x - new_max))
        running_max = new_max
    row_max = tl.max(running_max, axis=0)
    lane_scale = tl.where(running_max == -float("inf"), 0.0, tl.exp(running_max - row_max))
    row_sum = tl.sum(running_sum * lane_scale, axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    y = torch.empty((x2d.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    block = triton.next_power_of_2(n_cols)
    kernel = _softmax_one_block
    if block > TUNABLES["MAX_BLOCK_N"]:
        block, kernel = TUNABLES["MAX_BLOCK_N"], _softmax_online
    kernel[(x2d.shape[0],)](x2d, y, n_cols, x2d.stride(0), y.stride(0), BLOCK_N=block,
                            num_warps=TUNABLES["num_warps"], num_stages=TUNABLES["num_stages"])
    return y.reshape(x.shape)
