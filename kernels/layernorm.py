"""LayerNorm starter: LayerNorm with weight and bias over the last dimension or dim 1, in Triton.

Statistics are taken in float32 on values shifted by the row's first element: for a row like
100 + 1e-4 * noise the shifted values are exact and small, so the mean and variance keep their
precision where a plain float32 mean of ~100 would already be off by more than the noise.
A row that fits in one block is read once and written once, with an exact two-pass variance in
registers; short rows are packed several to a program. One program per tile, with few registers,
lets six 8-warp programs share a multiprocessor, and their loads are what keeps memory busy on
Hopper (a persistent grid that pipelines tiles, and loading weight and bias together with x,
cost registers and were measured slower: see docs/notes/memory_bound.md). x streams through
L2 marked evict-first while weight and bias, which every program rereads, are kept (evict-last).
Rows longer than MAX_BLOCK_N are read twice: per-chunk mean and squared deviations merged with
Chan's parallel formula, then the write. When such rows are also few (fewer than the GPU has
multiprocessors) and long, one program per row would leave most of the GPU idle: the row is then
split into chunks, one program per (row, chunk) in two launches, statistics then normalization,
with the same shift and the same merging.

Over dim 1 of x (B, C, H, W) (dim=1), x is viewed as (B, C, I) with I = H * W positions, each
normalized over its C channels, which lie I elements apart: a program takes CHANNEL_BLOCK_INNER
adjacent positions and reads every channel of them (loads contiguous along the positions), with
the same shift by the first channel and the same chunk merging when the channels do not fit one
tile of MAX_BLOCK_N elements.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "layernorm"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# MAX_BLOCK_N: widest row held in registers in one pass (longer rows take two passes).
# TILE_ELEMS: short rows are packed into one program until its tile holds this many elements.
# ELEMS_PER_THREAD and MAX_NUM_WARPS set num_warps from the tile size.
# CHANNEL_BLOCK_INNER: adjacent positions per program when normalizing over dim 1.
# SPLIT_ROWS_BELOW: fewer rows than this (about the multiprocessor count) leave the GPU part idle:
#   long rows are then split into chunks of SPLIT_CHUNK elements (read in TILE_ELEMS blocks), one
#   program per (row, chunk), if each row has at least SPLIT_MIN_ROW_BYTES (below that, the second
#   launch costs more than it saves).
TUNABLES = {"MAX_BLOCK_N": 16384, "TILE_ELEMS": 4096, "ELEMS_PER_THREAD": 16, "MAX_NUM_WARPS": 16,
            "num_stages": 1, "CHANNEL_BLOCK_INNER": 64,
            "SPLIT_ROWS_BELOW": 132, "SPLIT_CHUNK": 8192, "SPLIT_MIN_ROW_BYTES": 1048576}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"MAX_BLOCK_N": [1024, 2048, 4096, 8192, 16384, 32768],
                   "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
                   "ELEMS_PER_THREAD": [4, 8, 16, 32], "MAX_NUM_WARPS": [4, 8, 16, 32],
                   "num_stages": [1, 2, 3], "CHANNEL_BLOCK_INNER": [16, 32, 64, 128, 256],
                   "SPLIT_ROWS_BELOW": [0, 66, 132, 264, 528], "SPLIT_CHUNK": [4096, 8192, 16384, 32768, 65536],
                   "SPLIT_MIN_ROW_BYTES": [0, 262144, 1048576, 4194304]}
# At most this many chunks per row: every normalizing program rereads all of its row's statistics.
SPLIT_MAX_CHUNKS = 512


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
def _chan_merge(mean, sum_sq_dev, seen, part_mean, part_sum_sq_dev, part_count):
    """Chan's parallel formula: a part's mean and squared deviations merged into the running ones
    over `seen` values."""
    total = seen + part_count
    delta = part_mean - mean
    mean += delta * (part_count / total)
    sum_sq_dev += part_sum_sq_dev + delta * delta * (seen * part_count / total)
    return mean, sum_sq_dev


@triton.jit
def _merge_chunk(mean, sum_sq_dev, shifted, mask, start, n_total, BLOCK: tl.constexpr, AXIS: tl.constexpr):
    """One chunk's mean and squared deviations (along AXIS) merged into the running ones.
    Every earlier chunk was full, so `start` values are already merged."""
    chunk_count = tl.minimum(n_total - start, BLOCK).to(tl.float32)
    chunk_mean = tl.sum(shifted, axis=AXIS) / chunk_count
    chunk_dev = tl.where(mask, shifted - tl.expand_dims(chunk_mean, AXIS), 0.0)
    return _chan_merge(mean, sum_sq_dev, start * 1.0, chunk_mean, tl.sum(chunk_dev * chunk_dev, axis=AXIS),
                       chunk_count)


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
            mean, sum_sq_dev = _merge_chunk(mean, sum_sq_dev, shifted, mask, start, n_cols, BLOCK_N, 1)
        rstd = tl.rsqrt(sum_sq_dev / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_mask = cols < n_cols
            mask = row_mask[:, None] & col_mask[None, :]
            w = _load_param(w_ptr, cols, col_mask)
            b = _load_param(b_ptr, cols, col_mask)
            deviation = (_load_x(x_rows, cols, mask) - shift) - mean[:, None]
            _affine_store(y_rows, w, b, deviation, rstd, cols, mask)


@triton.jit
def _layernorm_channels(x_ptr, w_ptr, b_ptr, y_ptr, n_channels, n_inner, inner_blocks, eps,
                        BLOCK_C: tl.constexpr, BLOCK_I: tl.constexpr, ONE_BLOCK: tl.constexpr):
    # x and y are contiguous (outer, C, I); one program normalizes BLOCK_I positions of one outer index.
    pid = tl.program_id(0).to(tl.int64)
    outer = pid // inner_blocks
    inner = (pid % inner_blocks) * BLOCK_I + tl.arange(0, BLOCK_I)
    inner_mask = inner < n_inner
    base = outer * n_channels * n_inner + inner[None, :]
    x_band, y_band = x_ptr + base, y_ptr + base
    shift = tl.load(x_ptr + outer * n_channels * n_inner + inner, mask=inner_mask, other=0.0).to(tl.float32)
    if ONE_BLOCK:
        c = tl.arange(0, BLOCK_C)
        c_mask = c < n_channels
        mask = c_mask[:, None] & inner_mask[None, :]
        offsets = c[:, None].to(tl.int64) * n_inner
        x = tl.load(x_band + offsets, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        shifted = tl.where(mask, x - shift[None, :], 0.0)
        mean = tl.sum(shifted, axis=0) / n_channels
        deviation = tl.where(mask, shifted - mean[None, :], 0.0)
        rstd = tl.rsqrt(tl.sum(deviation * deviation, axis=0) / n_channels + eps)
        w = _load_param(w_ptr, c, c_mask).to(tl.float32)
        b = _load_param(b_ptr, c, c_mask).to(tl.float32)
        y = deviation * rstd[None, :] * w[:, None] + b[:, None]
        tl.store(y_band + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        mean = tl.zeros([BLOCK_I], tl.float32)
        sum_sq_dev = tl.zeros([BLOCK_I], tl.float32)
        for start in range(0, n_channels, BLOCK_C):
            c = start + tl.arange(0, BLOCK_C)
            mask = (c < n_channels)[:, None] & inner_mask[None, :]
            x = tl.load(x_band + c[:, None].to(tl.int64) * n_inner, mask=mask, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            shifted = tl.where(mask, x - shift[None, :], 0.0)
            mean, sum_sq_dev = _merge_chunk(mean, sum_sq_dev, shifted, mask, start, n_channels, BLOCK_C, 0)
        rstd = tl.rsqrt(sum_sq_dev / n_channels + eps)
        for start in range(0, n_channels, BLOCK_C):
            c = start + tl.arange(0, BLOCK_C)
            c_mask = c < n_channels
            mask = c_mask[:, None] & inner_mask[None, :]
            offsets = c[:, None].to(tl.int64) * n_inner
            x = tl.load(x_band + offsets, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = _load_param(w_ptr, c, c_mask).to(tl.float32)
            b = _load_param(b_ptr, c, c_mask).to(tl.float32)
            y = ((x - shift[None, :]) - mean[None, :]) * rstd[None, :] * w[:, None] + b[:, None]
            tl.store(y_band + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def _channels(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, dim: int) -> torch.Tensor:
    """LayerNorm over a dimension that is not the last: x viewed as (outer, C, I)."""
    n_channels = x.shape[dim]
    n_outer, n_inner = x.shape[:dim].numel(), x.shape[dim + 1:].numel()
    x3d = x.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    block_i = min(triton.next_power_of_2(n_inner), TUNABLES["CHANNEL_BLOCK_INNER"])
    block_c = triton.next_power_of_2(n_channels)
    one_block = block_c * block_i <= TUNABLES["MAX_BLOCK_N"]
    if not one_block:
        block_c = max(1, min(block_c, TUNABLES["TILE_ELEMS"] // block_i))
    inner_blocks = triton.cdiv(n_inner, block_i)
    _layernorm_channels[(n_outer * inner_blocks,)](
        x3d, weight.contiguous(), bias.contiguous(), y, n_channels, n_inner, inner_blocks, eps,
        BLOCK_C=block_c, BLOCK_I=block_i, ONE_BLOCK=one_block,
        num_warps=_num_warps(block_c * block_i), num_stages=TUNABLES["num_stages"])
    return y


@triton.jit
def _layernorm_split_stats(x_ptr, stats_ptr, n_cols, x_row_stride, n_chunks, chunk, n_parts,
                           BLOCK_N: tl.constexpr):
    # Program (row, chunk): the chunk's mean and squared deviations of x shifted by the row's first
    # element, in stats[0, part] and stats[1, part], part = row * n_chunks + chunk.
    part = tl.program_id(0).to(tl.int64)
    row, begin = part // n_chunks, (part % n_chunks) * chunk
    end = tl.minimum(begin + chunk, n_cols)
    x_row = x_ptr + row * x_row_stride
    shift = tl.load(x_row).to(tl.float32)
    mean = tl.zeros([1], tl.float32)
    sum_sq_dev = tl.zeros([1], tl.float32)
    for start in range(begin, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (cols < end)[None, :]
        shifted = tl.where(mask, _load_x(x_row, cols, mask) - shift, 0.0)
        mean, sum_sq_dev = _merge_chunk(mean, sum_sq_dev, shifted, mask, start - begin, end - begin, BLOCK_N, 1)
    one = tl.arange(0, 1)
    tl.store(stats_ptr + part + one, mean)
    tl.store(stats_ptr + n_parts + part + one, sum_sq_dev)


@triton.jit
def _layernorm_split_apply(x_ptr, w_ptr, b_ptr, y_ptr, stats_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                           n_chunks, chunk, n_parts, eps, BLOCK_N: tl.constexpr, BLOCK_CHUNKS: tl.constexpr):
    # Program (chunk, row) normalizes one chunk of one row. It first merges all of its row's chunk
    # statistics (a few KiB from L2, the same numbers in the same order in every program of the
    # row), which saves a launch and a buffer over merging them in a kernel of their own. The k
    # parts are merged as Chan's formula merges two: the mean first, then each part's squared
    # deviations plus count * (part mean - mean)^2.
    # Chunk-major: the rows of one chunk run side by side, so the chunk's weight and bias come from
    # memory once and then from L2 (row-major, a 4M-column row's 32 MB of them would be reread per row).
    pid = tl.program_id(0).to(tl.int64)
    row, begin = pid % n_rows, (pid // n_rows) * chunk
    end = tl.minimum(begin + chunk, n_cols)
    parts = tl.arange(0, BLOCK_CHUNKS)
    part_mask = parts < n_chunks
    row_parts = stats_ptr + row * n_chunks + parts
    part_means = tl.load(row_parts, mask=part_mask, other=0.0)
    part_sum_sq_devs = tl.load(row_parts + n_parts, mask=part_mask, other=0.0)
    counts = tl.where(part_mask, tl.minimum(n_cols - parts.to(tl.int64) * chunk, chunk), 0).to(tl.float32)
    mean = tl.sum(counts * part_means, axis=0) / n_cols
    delta = part_means - mean
    rstd = tl.rsqrt(tl.sum(part_sum_sq_devs + counts * delta * delta, axis=0) / n_cols + eps)
    x_row, y_row = x_ptr + row * x_row_stride, y_ptr + row * y_row_stride
    shift = tl.load(x_row).to(tl.float32)
    for start in range(begin, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < end
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = _load_param(w_ptr, cols, mask).to(tl.float32)
        b = _load_param(b_ptr, cols, mask).to(tl.float32)
        y = ((x - shift) - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _split_rows(x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, y: torch.Tensor, eps: float) -> bool:
    """Normalize few long rows as (row, chunk) programs, if the rows are few and long enough; say whether it did.

    16 rows of 4M elements are 16 programs on a 132-multiprocessor GPU, each streaming 48 MB
    alone. Two launches over (row, chunk) programs fill the GPU instead: per-chunk statistics, then
    the normalization (which merges its row's statistics first). x is read twice either way."""
    n_rows, n_cols = x2d.shape
    # Blocks of TILE_ELEMS, not MAX_BLOCK_N: small programs with few registers (44 for 4096 float32
    # elements in 8 warps, against 102 for 16384 in 16) let five share a multiprocessor, so one's
    # loads are in flight while another reduces or stores.
    block_n = min(triton.next_power_of_2(TUNABLES["SPLIT_CHUNK"]), TUNABLES["TILE_ELEMS"])
    # Each normalizing program rereads its row's statistics, so their number per row is bounded:
    # longer rows take longer chunks (whole blocks, so chunk starts stay aligned).
    chunk = max(TUNABLES["SPLIT_CHUNK"], triton.cdiv(n_cols, SPLIT_MAX_CHUNKS))
    chunk = triton.cdiv(chunk, block_n) * block_n
    if (n_rows >= TUNABLES["SPLIT_ROWS_BELOW"] or n_cols <= chunk
            or n_cols * x2d.element_size() < TUNABLES["SPLIT_MIN_ROW_BYTES"]):
        return False
    n_chunks = triton.cdiv(n_cols, chunk)
    n_parts = n_rows * n_chunks
    stats = torch.empty((2, n_parts), dtype=torch.float32, device=x2d.device)
    num_warps = _num_warps(block_n)
    _layernorm_split_stats[(n_parts,)](x2d, stats, n_cols, x2d.stride(0), n_chunks, chunk, n_parts,
                                       BLOCK_N=block_n, num_warps=num_warps, num_stages=TUNABLES["num_stages"])
    _layernorm_split_apply[(n_parts,)](x2d, weight, bias, y, stats, n_rows, n_cols, x2d.stride(0), y.stride(0),
                                       n_chunks, chunk, n_parts, eps, BLOCK_N=block_n,
                                       BLOCK_CHUNKS=triton.next_power_of_2(n_chunks), num_warps=num_warps,
                                       num_stages=TUNABLES["num_stages"])
    return True


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
              dim: int = -1) -> torch.Tensor:
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"layernorm: cannot normalize x {tuple(x.shape)} over dim {dim}")
    dim %= x.dim()
    n_cols = x.shape[dim]
    if weight.shape != (n_cols,) or bias.shape != (n_cols,):
        raise ValueError(f"layernorm: x {tuple(x.shape)} needs dimension {dim} matching weight "
                         f"{tuple(weight.shape)} and bias {tuple(bias.shape)} of shape (N,)")
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[dim + 1:].numel() != 1:
        return _channels(x, weight, bias, eps, dim)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    weight, bias = weight.contiguous(), bias.contiguous()
    n_rows = x2d.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if _split_rows(x2d, weight, bias, y, eps):
        return y.reshape(x.shape)
    block_n = triton.next_power_of_2(n_cols)
    one_block = block_n <= TUNABLES["MAX_BLOCK_N"]
    block_n = min(block_n, TUNABLES["MAX_BLOCK_N"])
    rows = min(max(1, TUNABLES["TILE_ELEMS"] // block_n), triton.next_power_of_2(n_rows))
    _layernorm_rows[(triton.cdiv(n_rows, rows),)](
        x2d, weight, bias, y, n_rows, n_cols, x2d.stride(0), y.stride(0), eps,
        ROWS=rows, BLOCK_N=block_n, ONE_BLOCK=one_block,
        num_warps=_num_warps(rows * block_n), num_stages=TUNABLES["num_stages"])
    return y.reshape(x.shape)
