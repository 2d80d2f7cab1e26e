"""Softmax starter: softmax over the last dimension, in Triton, with float32 statistics.

A row that fits in one block is read once and written once; short rows are packed several to a
program so every program moves a useful amount of data. Rows longer than MAX_BLOCK_N take two
passes: an online (running max, running sum) pass over column chunks, then the normalized write.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# MAX_BLOCK_N: widest row held in registers in one pass (longer rows take two passes).
# TILE_ELEMS: short rows are packed into one program until its tile holds this many elements.
# ELEMS_PER_THREAD and MAX_NUM_WARPS set num_warps from the tile size.
TUNABLES = {"MAX_BLOCK_N": 16384, "TILE_ELEMS": 4096, "ELEMS_PER_THREAD": 16, "MAX_NUM_WARPS": 16,
            "num_stages": 1}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"MAX_BLOCK_N": [1024, 2048, 4096, 8192, 16384, 32768],
                   "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
                   "ELEMS_PER_THREAD": [4, 8, 16, 32], "MAX_NUM_WARPS": [4, 8, 16, 32],
                   "num_stages": [1, 2, 3]}


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                  ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    # Rows past the end re-read the last row instead of all -inf, which would turn into nan
    # (and warnings under the interpreter); only their stores are masked off.
    x_rows = x_ptr + tl.minimum(rows, n_rows - 1)[:, None] * x_row_stride
    y_rows = y_ptr + rows[:, None] * y_row_stride
    if ONE_BLOCK:
        cols = tl.arange(0, BLOCK_N)
        col_mask = (cols < n_cols)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=col_mask, other=-float("inf")).to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=1)[:, None])
        # One reciprocal per row: a multiply per element is cheaper than a divide.
        y = num * (1.0 / tl.sum(num, axis=1))[:, None]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask)
    else:
        row_max = tl.full([ROWS], -float("inf"), tl.float32)
        row_sum = tl.zeros([ROWS], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = tl.load(x_rows + cols[None, :], mask=(cols < n_cols)[None, :], other=-float("inf")).to(tl.float32)
            new_max = tl.maximum(row_max, tl.max(x, axis=1))
            # While a row has seen only -inf (masked entries), exp(-inf - -inf) would be nan:
            # shifting by 0 instead keeps its sum at exactly 0.
            safe_max = tl.where(new_max == -float("inf"), 0.0, new_max)
            row_sum = row_sum * tl.exp(row_max - safe_max) + tl.sum(tl.exp(x - safe_max[:, None]), axis=1)
            row_max = new_max
        inv_sum = 1.0 / row_sum
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_mask = (cols < n_cols)[None, :]
            x = tl.load(x_rows + cols[None, :], mask=col_mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - row_max[:, None]) * inv_sum[:, None]
            tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask)


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    n_cols = x.shape[-1] if x.dim() > 0 else 1
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    block_n = triton.next_power_of_2(n_cols)
    one_block = block_n <= TUNABLES["MAX_BLOCK_N"]
    block_n = min(block_n, TUNABLES["MAX_BLOCK_N"])
    rows = min(max(1, TUNABLES["TILE_ELEMS"] // block_n), triton.next_power_of_2(n_rows))
    _softmax_rows[(triton.cdiv(n_rows, rows),)](
        x2d, y, n_rows, n_cols, x2d.stride(0), y.stride(0),
        ROWS=rows, BLOCK_N=block_n, ONE_BLOCK=one_block,
        num_warps=_num_warps(rows * block_n), num_stages=TUNABLES["num_stages"])
    return y.reshape(x.shape)
