"""LayerNorm starter: LayerNorm over the last dimension with weight and bias, in Triton.

Statistics are taken in float32 on values shifted by the row's first element: for a row like
100 + 1e-4 * noise the shifted values are exact and small, so the mean and variance keep their
precision where a plain float32 mean of ~100 would already be off by more than the noise.
A row that fits in one block is read once and written once, with an exact two-pass variance in
registers; short rows are packed several to a program. One program per tile, with few registers,
lets six 8-warp programs share a multiprocessor, and their loads are what keeps memory busy on
Hopper (a persistent grid that pipelines tiles, and loading weight and bias together with x,
cost registers and were measured slower: see benchmarks/notes/memory_bound.md). x streams through
L2 marked evict-first while weight and bias, which every program rereads, are kept (evict-last).
Rows longer than MAX_BLOCK_N are read twice: per-chunk mean and squared deviations merged with
Chan's parallel formula, then the write.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "layernorm"

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
def _load_param(p_ptr, cols, col_mask):
    return tl.load(p_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")


@triton.jit
def _load_x(x_rows, cols, mask):
    return tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)


@triton.jit
def _affine_store(y_rows, w, b, deviation, rstd, cols, mask):
    y = deviation * rstd[:, None] * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    tl.store(y_rows + cols[None, :], y.to(y_rows.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride, eps,
                    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * x_row_stride
    y_rows = y_ptr + rows[:, None] * y_row_stride
    shift = tl.load(x_ptr + rows * x_row_stride, mask=row_mask, other=0.0).to(tl.float32)[:, None]
    if ONE_BLOCK:
        cols = tl.arange(0, BLOCK_N)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        shifted = tl.where(mask, _load_x(x_rows, cols, mask) - shift, 0.0)
        mean = tl.sum(shifted, axis=1) / n_cols
        deviation = tl.where(mask, shifted - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(deviation * deviation, axis=1) / n_cols + eps)
        w = _load_param(w_ptr, cols, col_mask)
        b = _load_param(b_ptr, cols, col_mask)
        _affine_store(y_rows, w, b, deviation, rstd, cols, mask)
    else:
        mean = tl.zeros([ROWS], tl.float32)
        sum_sq_dev = tl.zeros([ROWS], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            mask = row_mask[:, None] & (cols < n_cols)[None, :]
            shifted = tl.where(mask, _load_x(x_rows, cols, mask) - shift, 0.0)
            # Every earlier chunk was full, so `start` values are already merged.
            seen = start * 1.0
            chunk_count = tl.minimum(n_cols - start, BLOCK_N).to(tl.float32)
            chunk_mean = tl.sum(shifted, axis=1) / chunk_count
            chunk_dev = tl.where(mask, shifted - chunk_mean[:, None], 0.0)
            delta = chunk_mean - mean
            total = seen + chunk_count
            mean += delta * (chunk_count / total)
            sum_sq_dev += tl.sum(chunk_dev * chunk_dev, axis=1) + delta * delta * (seen * chunk_count / total)
        rstd = tl.rsqrt(sum_sq_dev / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            w = _load_param(w_ptr, cols, col_mask)
            b = _load_param(b_ptr, cols, col_mask)
            deviation = (_load_x(x_rows, cols, mask) - shift) - mean[:, None]
            _affine_store(y_rows, w, b, deviation, rstd, cols, mask)


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    n_cols = x.shape[-1] if x.dim() > 0 else 0
    if x.dim() == 0 or weight.shape != (n_cols,) or bias.shape != (n_cols,):
        raise ValueError(f"layernorm: x {tuple(x.shape)} needs a last dimension matching weight "
                         f"{tuple(weight.shape)} and bias {tuple(bias.shape)} of shape (N,)")
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    weight, bias = weight.contiguous(), bias.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    block_n = triton.next_power_of_2(n_cols)
    one_block = block_n <= TUNABLES["MAX_BLOCK_N"]
    block_n = min(block_n, TUNABLES["MAX_BLOCK_N"])
    rows = min(max(1, TUNABLES["TILE_ELEMS"] // block_n), triton.next_power_of_2(n_rows))
    _layernorm_rows[(triton.cdiv(n_rows, rows),)](
        x2d, weight, bias, y, n_rows, n_cols, x2d.stride(0), y.stride(0), eps,
        ROWS=rows, BLOCK_N=block_n, ONE_BLOCK=one_block,
        num_warps=_num_warps(rows * block_n), num_stages=TUNABLES["num_stages"])
    return y.reshape(x.shape)
