"""Flash attention starter: softmax(Q K^T * sm_scale) V over (B, H, S, D), causal or not, in Triton.

FlashAttention-2 forward: each program owns BLOCK_M query rows of one (batch, head), keeps them in
registers and streams the keys and values in BLOCK_N blocks, with an online softmax (running row
max and row sum, the output rescaled as the max grows), so the S x S score matrix never exists.
Scores are pre-multiplied by log2(e) so the softmax uses exp2. A key block is masked only where it
has to be: blocks entirely below the causal diagonal and inside the sequence run unmasked, the
blocks that straddle the diagonal or the sequence end run masked, and causal blocks entirely above
the diagonal are never loaded.

Grouped-query and multi-query attention: k and v may have fewer heads than q (KV dividing H);
query head h reads key/value head h // (H / KV), as torch's scaled_dot_product_attention with
enable_gqa does. Heads of one group run next to each other, so their K and V stay in L2.
Head dims up to MAX_HEAD_DIM (256); D above 128 takes the "WIDE" blocks, whose 256-wide q and
accumulator tiles leave room for fewer rows.

Above MAX_HEAD_DIM a (BLOCK_M x D) query tile and accumulator no longer fit in registers, so the scores are
kept in memory instead (two kernels, "SCORES" and "VALUES" tunables): the first computes Q K^T tile by tile,
streaming D, and writes each tile's P = exp2(score - tile max) (float16 for 16-bit inputs) with the tile's row
max and exp-sum; the second folds those partial sums into each row's softmax, rescales P by one factor a row and
tile, and multiplies it by one D-slice of V. For KernelBench's head dim 1024 (B2 H8 S512) PyTorch's fused backends
take the memory-efficient kernel, about 0.15 ms on an H200 for 17 GFLOP; this path 64 us (storing P rather than
the scores: 74 us before, benchmarks/results/2026-12-01_NVIDIA-H200_s29). P costs B*H*S*S*2 bytes (4 for float32
inputs); calls whose float32 scores would pass SCORES_MAX_BYTES are refused at once with a ValueError.

On Hopper, for calls of at least `tma_min_gflop` of work, and when q, k, v and the output have a
unit last stride and 16-byte-aligned strides, the tiles move by TMA (tensor descriptors), which
frees the registers pointer arithmetic takes: on the H200 at B4 H32 S2048 D128 causal (69 GFLOP),
396 vs 382 TFLOP/s (fp16) and 419 vs 388 (bf16) at the same blocks
(docs/notes/compute_bound.md). At model shapes the pointer path was faster on an H100: at
B4 H16 S1024 D128 causal (17 GFLOP) 63.5 against 90.8 us, 1.56x SDPA's flash backend where the TMA
path was 0.86x (docs/notes/model_shapes.md); hence the 64-GFLOP threshold. Small calls take
the pointer path anyway: building the four descriptors costs about 15 us of host time.
"""

import functools
import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
from torch._subclasses.fake_tensor import is_fake

KERNEL_TYPE = "flash_attention"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# One line per shape bucket: the big blocks from `large_min_seq` queries up, the small ones below,
# and the wide ones for head dims above 128 at any length.
TUNABLES = {
    "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3,
    "SMALL_BLOCK_M": 32, "SMALL_BLOCK_N": 32, "small_num_warps": 4, "small_num_stages": 2,
    "WIDE_BLOCK_M": 64, "WIDE_BLOCK_N": 64, "wide_num_warps": 8, "wide_num_stages": 2,
    "large_min_seq": 256, "tma_min_gflop": 64,
    "SCORES_BLOCK_M": 128, "SCORES_BLOCK_N": 128, "SCORES_BLOCK_K": 64, "scores_num_warps": 8,
    "scores_num_stages": 3,
    "VALUES_BLOCK_M": 64, "VALUES_BLOCK_N": 32, "VALUES_BLOCK_D": 128, "values_num_warps": 4,
    "values_num_stages": 2,
}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [32, 64, 128], "num_warps": [4, 8], "num_stages": [2, 3, 4, 5],
    "SMALL_BLOCK_M": [16, 32, 64], "SMALL_BLOCK_N": [16, 32, 64], "small_num_warps": [2, 4],
    "small_num_stages": [1, 2, 3],
    "WIDE_BLOCK_M": [16, 32, 64, 128], "WIDE_BLOCK_N": [16, 32, 64], "wide_num_warps": [4, 8],
    "wide_num_stages": [1, 2, 3],
    "large_min_seq": [64, 128, 256, 512, 1024], "tma_min_gflop": [0, 1, 4, 16, 64],
    "SCORES_BLOCK_M": [32, 64, 128], "SCORES_BLOCK_N": [32, 64, 128], "SCORES_BLOCK_K": [32, 64],
    "scores_num_warps": [4, 8], "scores_num_stages": [2, 3, 4],
    "VALUES_BLOCK_M": [32, 64, 128], "VALUES_BLOCK_N": [32, 64], "VALUES_BLOCK_D": [64, 128, 256],
    "values_num_warps": [4, 8], "values_num_stages": [1, 2, 3],
}

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# The largest head dim the one-pass kernel takes. Above it a (BLOCK_M x D) query tile and accumulator no
# longer fit in registers (the compile would take minutes to produce a spilling kernel): such calls keep
# their scores in memory (the module doc).
MAX_HEAD_DIM = 256
# The most memory the scores of one call may take (float32, B*H*S*S*4 bytes); a call above it is refused at once,
# and a router leaves it to PyTorch. KernelBench's B32 H32 S512 takes 1 GiB.
SCORES_MAX_BYTES = 2 ** 31
# Head dims above this take the WIDE blocks.
WIDE_HEAD_DIM = 128
LOG2_E = 1.4426950408889634


@triton.jit
def _online_softmax_step(acc, row_sum, row_max, q, k, v, keys, queries, seq_k, causal_shift, qk_scale,
                         MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Folds one block of keys k and values v (BLOCK_N rows each) into the running output, row sum and max.

    UPCAST is for the CPU interpreter, whose tl.dot multiplies bfloat16 tiles as their raw uint16
    bits: there the tiles go to float32 first (products of 16-bit floats are exact in float32, so
    no result changes). "ieee" keeps float32 inputs exact; 16-bit inputs use the tensor cores anyway.
    """
    p_dtype = v.dtype
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    scores = tl.dot(q, tl.trans(k), input_precision="ieee")
    if MASKED:
        visible = keys[None, :] < seq_k
        if CAUSAL:
            visible = visible & (keys[None, :] <= queries[:, None] + causal_shift)
        scores = tl.where(visible, scores, -float("inf"))
    # qk_scale > 0, so the max of the raw scores gives the max of the scaled ones, and the scaling
    # folds into one multiply-add with the max subtraction. Every valid query row sees a key in the
    # first block it visits, so new_max is finite from then on and exp2 never meets -inf - -inf.
    new_max = tl.maximum(row_max, tl.max(scores, axis=1) * qk_scale)
    rescale = tl.math.exp2(row_max - new_max)
    p = tl.math.exp2(scores * qk_scale - new_max[:, None])
    row_sum = row_sum * rescale + tl.sum(p, axis=1)
    # P is rounded to the input dtype, as the tensor cores need, before it meets V.
    p = p.to(p_dtype)
    if UPCAST:
        p = p.to(tl.float32)
    acc = tl.dot(p, v, acc * rescale[:, None], input_precision="ieee")
    return acc, row_sum, new_max


@triton.jit
def _attend_key_blocks(acc, row_sum, row_max, q, k_head, v_head, stride_kn, stride_kd, stride_vn, stride_vd,
                       dims, queries, key_start, key_stop, seq_k, causal_shift, qk_scale,
                       BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                       MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Folds the keys [key_start, key_stop) in, loading them through pointers."""
    dim_ok = dims[None, :] < HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)
    # int64 offsets and steps: S times the sequence stride may pass 2^31.
    k_ptrs = k_head + (key_start + offs_n).to(tl.int64)[:, None] * stride_kn + dims[None, :] * stride_kd
    v_ptrs = v_head + (key_start + offs_n).to(tl.int64)[:, None] * stride_vn + dims[None, :] * stride_vd
    k_step = tl.cast(stride_kn, tl.int64) * BLOCK_N
    v_step = tl.cast(stride_vn, tl.int64) * BLOCK_N
    for start_n in range(key_start, key_stop, BLOCK_N):
        keys = start_n + offs_n
        tile_ok = dim_ok
        if MASKED:
            tile_ok = dim_ok & (keys[:, None] < seq_k)
        k = tl.load(k_ptrs, mask=tile_ok, other=0.0)
        v = tl.load(v_ptrs, mask=tile_ok, other=0.0)
        acc, row_sum, row_max = _online_softmax_step(acc, row_sum, row_max, q, k, v, keys, queries, seq_k,
                                                     causal_shift, qk_scale, MASKED, CAUSAL, UPCAST)
        k_ptrs += k_step
        v_ptrs += v_step
    return acc, row_sum, row_max


@triton.jit
def _attend_key_blocks_tma(acc, row_sum, row_max, q, desc_k, desc_v, batch, head, queries, key_start, key_stop,
                           seq_k, causal_shift, qk_scale, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                           MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """Folds the keys [key_start, key_stop) in, copied by TMA (which zero-fills past the sequence end)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(key_start, key_stop, BLOCK_N):
        k = desc_k.load([batch, head, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        v = desc_v.load([batch, head, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
        acc, row_sum, row_max = _online_softmax_step(acc, row_sum, row_max, q, k, v, start_n + offs_n, queries,
                                                     seq_k, causal_shift, qk_scale, MASKED, CAUSAL, UPCAST)
    return acc, row_sum, row_max


@triton.jit
def _query_block(H, group, seq_q, seq_k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """This program's (batch, query head, key/value head, first query) and the key ranges it
    visits: [0, unmasked_stop) is seen in full by every query row of the block, [unmasked_stop,
    key_stop) needs the mask. `group` query heads share one key/value head."""
    # Causal query blocks near the end do the most work: launch them first so the last wave is short.
    if CAUSAL:
        block_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        block_m = tl.program_id(0)
    first_query = block_m * BLOCK_M
    # Causal alignment as in the reference: query i sees keys j <= i + (seq_k - seq_q).
    causal_shift = seq_k - seq_q
    if CAUSAL:
        unmasked_stop = tl.minimum(first_query + causal_shift + 1, seq_k)
        key_stop = tl.minimum(first_query + BLOCK_M + causal_shift, seq_k)
    else:
        unmasked_stop = seq_k
        key_stop = seq_k
    unmasked_stop = tl.maximum(unmasked_stop, 0) // BLOCK_N * BLOCK_N
    head = tl.program_id(1) % H
    return tl.program_id(1) // H, head, head // group, first_query, causal_shift, unmasked_stop, key_stop


@triton.jit
def _flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, group, seq_q, seq_k, qk_scale,
                            stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                            stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                            BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    # torch.compile passes a Python float as float64, which would carry the softmax and the accumulator to float64.
    qk_scale = tl.cast(qk_scale, tl.float32)
    batch, head, kv_head, first_query, causal_shift, unmasked_stop, key_stop = _query_block(
        H, group, seq_q, seq_k, BLOCK_M, BLOCK_N, CAUSAL)
    # int64 offsets: B * H * S * D may pass 2^31.
    q_head = q_ptr + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
    k_head = k_ptr + batch.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_head = v_ptr + batch.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    o_head = o_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
    queries = first_query + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_ok = (queries[:, None] < seq_q) & (dims[None, :] < HEAD_DIM)
    q = tl.load(q_head + queries.to(tl.int64)[:, None] * stride_qs + dims[None, :] * stride_qd, mask=q_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_max = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    acc, row_sum, row_max = _attend_key_blocks(
        acc, row_sum, row_max, q, k_head, v_head, stride_ks, stride_kd, stride_vs, stride_vd, dims, queries,
        0, unmasked_stop, seq_k, causal_shift, qk_scale, BLOCK_N, HEAD_DIM, False, CAUSAL, UPCAST)
    acc, row_sum, row_max = _attend_key_blocks(
        acc, row_sum, row_max, q, k_head, v_head, stride_ks, stride_kd, stride_vs, stride_vd, dims, queries,
        unmasked_stop, key_stop, seq_k, causal_shift, qk_scale, BLOCK_N, HEAD_DIM, True, CAUSAL, UPCAST)

    out = acc / row_sum[:, None]
    o_ptrs = o_head + queries.to(tl.int64)[:, None] * stride_os + dims[None, :] * stride_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=q_ok)


@triton.jit
def _flash_attention_tma_kernel(desc_q, desc_k, desc_v, desc_o, H, group, seq_q, seq_k, qk_scale,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                                CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """The same attention with every tile copied by TMA: (B, H, S, D) descriptors, so any batch and
    head strides work, and rows past S or columns past D arrive as zeros and are clipped on store."""
    qk_scale = tl.cast(qk_scale, tl.float32)       # float64 under torch.compile, as above
    batch, head, kv_head, first_query, causal_shift, unmasked_stop, key_stop = _query_block(
        H, group, seq_q, seq_k, BLOCK_M, BLOCK_N, CAUSAL)
    queries = first_query + tl.arange(0, BLOCK_M)
    q = desc_q.load([batch, head, first_query, 0]).reshape(BLOCK_M, BLOCK_D)
    if UPCAST:
        q = q.to(tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    row_max = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    acc, row_sum, row_max = _attend_key_blocks_tma(
        acc, row_sum, row_max, q, desc_k, desc_v, batch, kv_head, queries, 0, unmasked_stop, seq_k, causal_shift,
        qk_scale, BLOCK_N, BLOCK_D, False, CAUSAL, UPCAST)
    acc, row_sum, row_max = _attend_key_blocks_tma(
        acc, row_sum, row_max, q, desc_k, desc_v, batch, kv_head, queries, unmasked_stop, key_stop, seq_k,
        causal_shift, qk_scale, BLOCK_N, BLOCK_D, True, CAUSAL, UPCAST)
    out = acc / row_sum[:, None]
    desc_o.store([batch, head, first_query, 0], out.to(desc_o.dtype).reshape(1, 1, BLOCK_M, BLOCK_D))


@triton.jit
def _scores_kernel(q_ptr, k_ptr, s_ptr, max_ptr, sum_ptr, H, group, seq_q, seq_k, head_dim, qk_scale,
                   stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                   UPCAST: tl.constexpr):
    """One (BLOCK_M x BLOCK_N) tile of the scaled scores (log2 units) of one (batch, head), D streamed in
    BLOCK_K slices; also the tile's row max and sum of exp2(score - max), the partial sums _values_kernel folds.
    Tiles wholly above the causal diagonal are never needed, so never computed."""
    qk_scale = tl.cast(qk_scale, tl.float32)       # float64 under torch.compile, as above
    first_query, first_key = tl.program_id(0) * BLOCK_M, tl.program_id(1) * BLOCK_N
    causal_shift = seq_k - seq_q
    if CAUSAL:
        if first_key > first_query + BLOCK_M - 1 + causal_shift:
            return
    bh = tl.program_id(2)
    batch, head = bh // H, bh % H
    queries = first_query + tl.arange(0, BLOCK_M)
    keys = first_key + tl.arange(0, BLOCK_N)
    slice_d = tl.arange(0, BLOCK_K)
    q_ptrs = (q_ptr + batch.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
              + queries.to(tl.int64)[:, None] * stride_qs + slice_d[None, :] * stride_qd)
    k_ptrs = (k_ptr + batch.to(tl.int64) * stride_kb + (head // group).to(tl.int64) * stride_kh
              + keys.to(tl.int64)[:, None] * stride_ks + slice_d[None, :] * stride_kd)
    scores = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start_d in range(0, head_dim, BLOCK_K):
        dim_ok = (start_d + slice_d)[None, :] < head_dim
        q = tl.load(q_ptrs, mask=(queries[:, None] < seq_q) & dim_ok, other=0.0)
        k = tl.load(k_ptrs, mask=(keys[:, None] < seq_k) & dim_ok, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), scores, input_precision="ieee")
        q_ptrs += BLOCK_K * stride_qd
        k_ptrs += BLOCK_K * stride_kd
    visible = keys[None, :] < seq_k
    if CAUSAL:
        visible = visible & (keys[None, :] <= queries[:, None] + causal_shift)
    scores = tl.where(visible, scores * qk_scale, -float("inf"))
    rows = bh.to(tl.int64) * seq_q + queries
    row_ok = queries < seq_q
    tile_max = tl.max(scores, axis=1)
    # A row with no visible key in this tile (causal) has max -inf: its sum is 0, and exp2 never sees -inf - -inf.
    # What is stored is this tile's own P, exp2(score - tile max) in [0, 1]: _values_kernel rescales it by one
    # factor per row, so it computes no exp2 and reads half the bytes (float16 for 16-bit inputs).
    p = tl.math.exp2(scores - tl.where(tile_max == -float("inf"), 0.0, tile_max)[:, None])
    tile_sum = tl.sum(p, axis=1)
    tl.store(s_ptr + rows[:, None] * seq_k + keys[None, :], p.to(s_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (keys[None, :] < seq_k))
    partial = (bh.to(tl.int64) * tl.num_programs(1) + tl.program_id(1)) * seq_q + queries
    tl.store(max_ptr + partial, tile_max, mask=row_ok)
    tl.store(sum_ptr + partial, tile_sum, mask=row_ok)


@triton.jit
def _values_kernel(s_ptr, max_ptr, sum_ptr, v_ptr, o_ptr, H, group, seq_q, seq_k, head_dim, score_tiles,
                   stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
                   SCORES_BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_D: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    """softmax(scores) times one BLOCK_D slice of V, for BLOCK_M query rows of one (batch, head): the rows' max
    and exp-sum folded from _scores_kernel's partials, then P = exp2(score - max) block by block, as flash does."""
    first_query, bh = tl.program_id(0) * BLOCK_M, tl.program_id(2)
    batch, head = bh // H, bh % H
    queries = first_query + tl.arange(0, BLOCK_M)
    row_ok = queries < seq_q
    causal_shift = seq_k - seq_q
    key_stop = seq_k
    if CAUSAL:
        key_stop = tl.minimum(first_query + BLOCK_M + causal_shift, seq_k)
    row_max = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for tile in range(0, tl.cdiv(key_stop, SCORES_BLOCK_N)):
        # Only the tiles _scores_kernel computed: under the diagonal for each row.
        ok = row_ok
        if CAUSAL:
            ok = ok & (tile * SCORES_BLOCK_N <= queries + causal_shift)
        partial = (bh.to(tl.int64) * score_tiles + tile) * seq_q + queries
        tile_max = tl.load(max_ptr + partial, mask=ok, other=-float("inf"))
        tile_sum = tl.load(sum_ptr + partial, mask=ok, other=0.0)
        new_max = tl.maximum(row_max, tile_max)
        safe_max = tl.where(new_max == -float("inf"), 0.0, new_max)
        row_sum = row_sum * tl.math.exp2(row_max - safe_max) + tile_sum * tl.math.exp2(tile_max - safe_max)
        row_max = new_max
    safe_max = tl.where(row_max == -float("inf"), 0.0, row_max)

    dims = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    s_rows = s_ptr + (bh.to(tl.int64) * seq_q + queries)[:, None] * seq_k
    v_head = v_ptr + batch.to(tl.int64) * stride_vb + (head // group).to(tl.int64) * stride_vh
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in range(0, key_stop, BLOCK_N):
        keys = start_n + offs_n
        visible = row_ok[:, None] & (keys[None, :] < seq_k)
        if CAUSAL:
            visible = visible & (keys[None, :] <= queries[:, None] + causal_shift)
        # The block lies in one score tile (BLOCK_N <= SCORES_BLOCK_N): one factor a row turns the tile's P into
        # the row's, exp2(tile max - row max). Tiles never computed (causal) are masked off, factor and values.
        tile = start_n // SCORES_BLOCK_N
        ok = row_ok
        if CAUSAL:
            ok = ok & (tile * SCORES_BLOCK_N <= queries + causal_shift)
        tile_max = tl.load(max_ptr + (bh.to(tl.int64) * score_tiles + tile) * seq_q + queries, mask=ok,
                           other=-float("inf"))
        factor = tl.math.exp2(tile_max - safe_max)
        tile_p = tl.load(s_rows + keys[None, :], mask=visible, other=0.0).to(tl.float32)
        v = tl.load(v_head + keys.to(tl.int64)[:, None] * stride_vs + dims[None, :] * stride_vd,
                    mask=(keys[:, None] < seq_k) & (dims[None, :] < head_dim), other=0.0)
        # P is rounded to the input dtype, as the tensor cores need, before it meets V (as in flash above).
        p = (tile_p * factor[:, None]).to(v.dtype)
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = tl.dot(p, v, acc, input_precision="ieee")
    out = acc / tl.where(row_ok, row_sum, 1.0)[:, None]       # rows past the end are not stored
    o_ptrs = (o_ptr + batch.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh
              + queries.to(tl.int64)[:, None] * stride_os + dims[None, :] * stride_od)
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dims[None, :] < head_dim))


def _attention_through_scores(q, k, v, out, causal: bool, qk_scale: float) -> None:
    """Attention for head dims above MAX_HEAD_DIM: the scores written by _scores_kernel, read by _values_kernel."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k, t = k.shape[2], TUNABLES
    tiles_n = -(-seq_k // t["SCORES_BLOCK_N"])
    # Each tile's P is in [0, 1]: float16 keeps 11 bits of it for 16-bit inputs (bfloat16 would keep 8)
    p_dtype = torch.float32 if q.dtype == torch.float32 else torch.float16
    scores = torch.empty((batch * heads, seq_q, seq_k), dtype=p_dtype, device=q.device)
    values_n = min(t["VALUES_BLOCK_N"], t["SCORES_BLOCK_N"])       # a values block inside one score tile
    tile_max = torch.empty((batch * heads, tiles_n, seq_q), dtype=torch.float32, device=q.device)
    tile_sum = torch.empty_like(tile_max)
    group, upcast = heads // k.shape[1], not q.is_cuda
    stage_bytes = (t["SCORES_BLOCK_M"] + t["SCORES_BLOCK_N"]) * t["SCORES_BLOCK_K"] * q.element_size()
    _scores_kernel[(-(-seq_q // t["SCORES_BLOCK_M"]), tiles_n, batch * heads)](
        q, k, scores, tile_max, tile_sum, heads, group, seq_q, seq_k, head_dim, qk_scale, *q.stride(), *k.stride(),
        BLOCK_M=t["SCORES_BLOCK_M"], BLOCK_N=t["SCORES_BLOCK_N"], BLOCK_K=t["SCORES_BLOCK_K"], CAUSAL=causal,
        UPCAST=upcast, num_warps=t["scores_num_warps"],
        num_stages=_stages_that_fit(t["scores_num_stages"], stage_bytes, 0, q.device))
    stage_bytes = values_n * (t["VALUES_BLOCK_M"] * scores.element_size() + t["VALUES_BLOCK_D"] * v.element_size())
    _values_kernel[(-(-seq_q // t["VALUES_BLOCK_M"]), -(-head_dim // t["VALUES_BLOCK_D"]), batch * heads)](
        scores, tile_max, tile_sum, v, out, heads, group, seq_q, seq_k, head_dim, tiles_n, *v.stride(), *out.stride(),
        SCORES_BLOCK_N=t["SCORES_BLOCK_N"], BLOCK_M=t["VALUES_BLOCK_M"], BLOCK_N=values_n,
        BLOCK_D=t["VALUES_BLOCK_D"], CAUSAL=causal, UPCAST=upcast, num_warps=t["values_num_warps"],
        num_stages=_stages_that_fit(t["values_num_stages"], stage_bytes, 0, q.device))


@functools.lru_cache(maxsize=None)
def _shared_memory_bytes(device_index: int) -> int:
    return triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"]


def _stages_that_fit(requested: int, stage_bytes: int, fixed_bytes: int, device: torch.device) -> int:
    """Fewer pipeline stages when the requested ones would not fit in shared memory (big float32 tiles)."""
    if device.type != "cuda":
        return requested
    return max(1, min(requested, (_shared_memory_bytes(device.index) - fixed_bytes) // stage_bytes))


def _address(t: torch.Tensor) -> int:
    """t's first element's address, for alignment checks. torch.compile traces the kernel on fake tensors, which
    have no memory: there it is t's offset into its storage, whose base the allocator aligns to 512 bytes."""
    if is_fake(t):
        return t.storage_offset() * t.element_size()
    return t.data_ptr()


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """TMA needs Hopper or later (or the interpreter), a unit last stride, 16-byte-aligned other strides and bases."""
    for t in tensors:
        if t.stride(-1) != 1 or _address(t) % 16 or any(s * t.element_size() % 16 for s in t.stride()[:-1]):
            return False
    return not tensors[0].is_cuda or _capability(tensors[0].device.index)[0] >= 9


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


def _block_config(seq_q: int, head_dim: int = 64) -> dict:
    """The wide blocks above WIDE_HEAD_DIM, else the big ones from `large_min_seq` queries up, else the small ones."""
    t = TUNABLES
    if head_dim > WIDE_HEAD_DIM:
        return {"BLOCK_M": t["WIDE_BLOCK_M"], "BLOCK_N": t["WIDE_BLOCK_N"], "num_warps": t["wide_num_warps"],
                "num_stages": t["wide_num_stages"]}
    if seq_q >= t["large_min_seq"]:
        return {"BLOCK_M": t["BLOCK_M"], "BLOCK_N": t["BLOCK_N"], "num_warps": t["num_warps"],
                "num_stages": t["num_stages"]}
    return {"BLOCK_M": t["SMALL_BLOCK_M"], "BLOCK_N": t["SMALL_BLOCK_N"], "num_warps": t["small_num_warps"],
            "num_stages": t["small_num_stages"]}


def _check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"flash_attention: expected (B, H, S, D) tensors, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"flash_attention: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} must share "
                         "B and D, and k and v must have the same shape")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"flash_attention: q's {q.shape[1]} heads must be a multiple of k and v's {k.shape[1]} "
                         "(grouped-query attention)")
    score_bytes = 4 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    if q.shape[3] > MAX_HEAD_DIM and score_bytes > SCORES_MAX_BYTES:
        raise ValueError(f"flash_attention: head dim D={q.shape[3]} is above MAX_HEAD_DIM = {MAX_HEAD_DIM}, and "
                         f"its scores would take {score_bytes / 2 ** 30:.1f} GiB, above SCORES_MAX_BYTES = "
                         f"{SCORES_MAX_BYTES / 2 ** 30:.1f} GiB; leave such attention to PyTorch")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"flash_attention: q, k and v must share one dtype of {SUPPORTED_DTYPES}, "
                        f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"flash_attention: q, k and v are on different devices ({q.device}, {k.device}, {v.device})")


def kernel_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    _check_inputs(q, k, v)
    batch, heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    if seq_k == 0:
        raise ValueError("flash_attention: k and v have no keys (S = 0), so the softmax is undefined")
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    if not scale > 0:
        raise ValueError(f"flash_attention: sm_scale must be positive, got {sm_scale}")
    if head_dim > MAX_HEAD_DIM:
        _attention_through_scores(q, k, v, out, bool(causal), scale * LOG2_E)
        return out
    config = _block_config(seq_q, head_dim)
    # tl.dot needs every tile side to be at least 16 (a power of two; shifts cost less than triton's helper).
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    stage_bytes = 2 * config["BLOCK_N"] * block_d * q.element_size()
    num_stages = _stages_that_fit(config["num_stages"], stage_bytes, config["BLOCK_M"] * block_d * q.element_size(),
                                  q.device)
    grid = (-(-seq_q // config["BLOCK_M"]), batch * heads)
    common = dict(BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_D=block_d, CAUSAL=bool(causal),
                  UPCAST=not q.is_cuda, num_warps=config["num_warps"], num_stages=num_stages)
    work = 4.0 * batch * heads * seq_q * seq_k * head_dim
    if work >= TUNABLES["tma_min_gflop"] * 1e9 and _tma_ready(q, k, v, out):
        descriptors = [TensorDescriptor.from_tensor(t, [1, 1, rows, block_d])
                       for t, rows in ((q, config["BLOCK_M"]), (k, config["BLOCK_N"]), (v, config["BLOCK_N"]),
                                       (out, config["BLOCK_M"]))]
        _flash_attention_tma_kernel[grid](*descriptors, heads, heads // kv_heads, seq_q, seq_k, scale * LOG2_E,
                                          **common)
    else:
        _flash_attention_kernel[grid](q, k, v, out, heads, heads // kv_heads, seq_q, seq_k, scale * LOG2_E,
                                      *q.stride(), *k.stride(), *v.stride(), *out.stride(), HEAD_DIM=head_dim,
                                      **common)
    return out
