"""RMSNorm starter: RMSNorm over the last dimension with a weight, in Triton, statistics in float32.

A row that fits in one block is read from memory once and written once; short rows are packed
several to a program so every program moves a useful amount of data. One program per tile, with
few registers, lets four 16-warp programs share a multiprocessor, and their loads are what keeps
memory busy on Hopper (a persistent grid that pipelines tiles was measured slower). The row is
loaded twice, as torch.compile's kernel does: the load for the sum of squares marks x evict-last
so that the load for the normalized write hits the cache, and marks it evict-first on the way
out; x then need not stay in registers across the reduction (measured 4% faster on an H200 than
one load held in registers, benchmarks/notes/memory_bound.md). The weight, which every program
rereads, is kept (evict-last). Rows longer than MAX_BLOCK_N take two passes: a sum of squares
over column chunks, then the normalized write.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"

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
def _load_weight(w_ptr, cols, col_mask):
    return tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")


@triton.jit
def _load_x_for_stats(x_rows, cols, mask):
    """x in float32, read for the sum of squares: kept in cache for the second read."""
    return tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)


@triton.jit
def _load_x(x_rows, cols, mask):
    """x in float32, read for the last time: it leaves L2 first."""
    return tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)


@triton.jit
def _scale_and_store(y_rows, w, x, inv_rms, cols, mask):
    y = x * inv_rms[:, None] * w.to(tl.float32)[None, :]
    tl.store(y_rows + cols[None, :], y.to(y_rows.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                  ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * x_row_stride
    y_rows = y_ptr + rows[:, None] * y_row_stride
    if ONE_BLOCK:
        cols = tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        x = _load_x_for_stats(x_rows, cols, mask)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        w = _load_weight(w_ptr, cols, col_mask)
        # The second read of the row comes from the cache.
        _scale_and_store(y_rows, w, _load_x(x_rows, cols, mask), inv_rms, cols, mask)
    else:
        sum_sq = tl.zeros([ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = _load_x_for_stats(x_rows, cols, row_mask[:, None] & (cols < n_cols)[None, :])
            sum_sq += x * x
        inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            w = _load_weight(w_ptr, cols, col_mask)
            _scale_and_store(y_rows, w, _load_x(x_rows, cols, mask), inv_rms, cols, mask)


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    n_cols = x.shape[-1] if x.dim() > 0 else 0
    if x.dim() == 0 or weight.shape != (n_cols,):
        raise ValueError(f"rmsnorm: x {tuple(x.shape)} needs a last dimension matching weight "
                         f"{tuple(weight.shape)} of shape (N,)")
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    weight = weight.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    block_n = triton.next_power_of_2(n_cols)
    one_block = block_n <= TUNABLES["MAX_BLOCK_N"]
    block_n = min(block_n, TUNABLES["MAX_BLOCK_N"])
    rows = min(max(1, TUNABLES["TILE_ELEMS"] // block_n), triton.next_power_of_2(n_rows))
    _rmsnorm_rows[(triton.cdiv(n_rows, rows),)](
        x2d, weight, y, n_rows, n_cols, x2d.stride(0), y.stride(0), eps,
        ROWS=rows, BLOCK_N=block_n, ONE_BLOCK=one_block,
        num_warps=_num_warps(rows * block_n), num_stages=TUNABLES["num_stages"])
    return y.reshape(x.shape)
