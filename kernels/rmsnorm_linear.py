"""RMSNorm + linear starter: y = rmsnorm(x, g, eps) @ W^T in two launches, the second the GEMM engine's.

1. n = rmsnorm(x): one row kernel, float32 statistics, rounded to x's dtype once as the unfused norm
   stores it (n is at most sqrt(K) |g| in size: x * g, which can overflow float16, is never rounded);
2. y = n @ W^T: the engine's GEMM, n and W streamed by TMA straight into the tensor cores.
Why not the norm inside the GEMM (sum of squares from the x tiles it loads, g applied to each tile
in registers): the register detour keeps wgmma from reading the tiles from shared memory as TMA
left them; on an H100 at 4096 x 2048 x 2048 that inline norm took 103.5 us against 71.8 for the two
launches (benchmarks/results/2026-11-23_NVIDIA-H100_norm_pass/).

The GEMM engine (the block between the ENGINE markers, shared with the other GEMM starters and kept in
step with kernels/_gemm_engine.py) picks the plan from GEMM_TABLE, measured per shape on a GPU;
TUNABLES may fix a plan for every shape instead of "table".
"""

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
from torch._subclasses.fake_tensor import is_fake

KERNEL_TYPE = "rmsnorm_linear"

# Tunable parameters: the built-in search agent edits this dict and nothing else. "table" takes the
# engine's measured plan for the shape; a plan (BMxBNxBK/wWARPS/sSTAGES) replaces it at every shape.
# NORM_BLOCK is the norm pass's row chunk.
TUNABLES = {"plan": "table", "split_k": "table", "group_m": "table", "warp_specialize": "table", "NORM_BLOCK": 2048}
# The values the search agent may try for each tunable: the engine's plain plans (ENGINE_PLANS).
TUNABLE_CHOICES = {
    "plan": ["table", "128x256x64/w8/s3", "256x128x64/w8/s3", "128x128x64/w8/s5", "128x128x64/w8/s4",
             "128x128x64/w4/s4", "128x128x128/w8/s3", "64x256x64/w4/s4", "128x64x64/w4/s5", "64x128x64/w4/s5",
             "64x64x64/w4/s6"],
    "split_k": ["table", 1, 2, 4, 8], "group_m": ["table", 4, 8, 16], "warp_specialize": ["table", False, True],
    "NORM_BLOCK": [512, 1024, 2048, 4096],
}

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# ==== GEMM ENGINE: begin (kernels/_gemm_engine.py; `python -m autokernel.core.starter_blocks` copies it) ====
# C = epilogue(prologue(A) @ B): a persistent Triton GEMM, one program per SM walking (tile, K slice)
# units in GROUP_M order. Operands move by TMA where the copy engine can describe them (Hopper, unit
# last stride, 16-byte rows), by pointer loads elsewhere; B is read as (K, N) rows or as the
# transpose of (N, K) rows (an nn.Linear weight), whichever its strides are. Constexpr choices:
#   prologue: ROW_SCALE, a float32 per-row factor on the accumulator (an RMSNorm's rsqrt statistic:
#             (r x) W = r (x W));
#   DUAL:     a second B and accumulator, act(A B) * (A B2) in the epilogue (SwiGLU's gate and up);
#   epilogue: GATE (act(G) * acc, G read), BIAS, ROTARY (rotate-half per head over the first
#             rot_cols columns, positions row % rot_seq), RESIDUAL (acc + R), and OUT_STAT (each
#             row's sum of squares of the rounded output per column tile, for the next RMSNorm).
# The activation (silu, gelu, relu2) is a run-time argument. Split-K: units of (tile, slice) write
# float32 partials; a second launch sums them in slice order (bitwise deterministic, no atomics) and
# applies the same epilogue. Plans (tile, warps, stages, GROUP_M, split, warp specialization) come
# from GEMM_TABLE, measured per shape on a GPU, by the nearest measured M at the same N and K; else
# one default plan per kind, K split while its tiles leave SMs idle.

# The bounded space of tile and pipeline plans ("BMxBNxBK/wWARPS/sSTAGES"): each fits an H100's
# registers and shared memory for its kind. A dual plan's BN is each accumulator's width.
ENGINE_PLANS = {
    "plain": ("128x256x64/w8/s3", "256x128x64/w8/s3", "128x128x64/w8/s5", "128x128x64/w8/s4", "128x128x64/w4/s4",
              "128x128x128/w8/s3", "64x256x64/w4/s4", "128x64x64/w4/s5", "64x128x64/w4/s5", "64x64x64/w4/s6"),
    "dual": ("128x128x64/w8/s3", "128x128x64/w8/s4", "128x64x64/w8/s4", "128x64x64/w4/s4", "64x128x64/w4/s4",
             "64x64x64/w4/s5"),
}
# Measured plans: "dtype/kind/N/K" -> [[M, plan], ...], written from the GPU sweep's gemm_table.json.
GEMM_TABLE = {
    'bfloat16/dual/5632/2048': [[512, "64x64x64/w4/s5/g8/k1/ws0"], [4096, "128x128x64/w8/s4/g8/k1/ws1"]],
    'bfloat16/plain/512/2048': [[4096, "128x128x64/w8/s5/g8/k1/ws0"]],
    'bfloat16/plain/768/768': [[512, "128x128x64/w4/s4/g8/k1/ws0"]],
    'bfloat16/plain/768/3072': [[512, "64x128x64/w4/s5/g8/k1/ws0"]],
    'bfloat16/plain/2048/2048': [[512, "128x128x64/w4/s4/g8/k1/ws0"], [4096, "256x128x64/w8/s3/g4/k1/ws0"]],
    'bfloat16/plain/2048/5632': [[512, "64x64x64/w4/s6/g8/k1/ws1"], [4096, "128x256x64/w8/s3/g8/k1/ws1"]],
    'bfloat16/plain/2304/768': [[512, "64x64x64/w4/s6/g8/k1/ws1"]],
    'bfloat16/plain/3072/768': [[512, "128x128x64/w8/s4/g8/k1/ws1"]],
    'bfloat16/plain/5632/2048': [[512, "128x128x64/w8/s5/g4/k1/ws0"], [4096, "128x128x64/w8/s5/g8/k1/ws1"]],
    'bfloat16/plain/32000/2048': [[512, "128x256x64/w8/s3/g8/k1/ws0"], [4096, "128x256x64/w8/s3/g8/k1/ws1"]],
    'bfloat16/plain/50257/768': [[512, "128x128x64/w8/s5/g8/k1/ws0"]],
    'float16/dual/5632/2048': [[512, "128x128x64/w8/s4/g8/k1/ws0"], [4096, "128x128x64/w8/s4/g8/k1/ws1"]],
    'float16/plain/512/2048': [[4096, "128x128x64/w8/s5/g8/k1/ws0"]],
    'float16/plain/768/768': [[512, "128x128x64/w8/s5/g8/k1/ws1"]],
    'float16/plain/768/3072': [[512, "64x128x64/w4/s5/g8/k1/ws0"]],
    'float16/plain/2048/2048': [[512, "128x128x64/w4/s4/g4/k1/ws0"], [4096, "256x128x64/w8/s3/g4/k1/ws0"]],
    'float16/plain/2048/5632': [[512, "128x128x64/w8/s4/g8/k1/ws0"], [4096, "128x256x64/w8/s3/g8/k1/ws1"]],
    'float16/plain/2304/768': [[512, "64x128x64/w4/s5/g8/k1/ws0"]],
    'float16/plain/3072/768': [[512, "128x128x64/w8/s4/g8/k1/ws1"]],
    'float16/plain/5632/2048': [[512, "128x128x64/w8/s5/g8/k1/ws0"], [4096, "128x128x64/w8/s5/g8/k1/ws1"]],
    'float16/plain/32000/2048': [[512, "128x256x64/w8/s3/g8/k1/ws1"], [4096, "128x256x64/w8/s3/g8/k1/ws0"]],
    'float16/plain/50257/768': [[512, "128x128x64/w8/s5/g8/k1/ws0"]],
}
ENGINE_INTERPRETER_PROGRAMS = 3      # the interpreter has no SMs: a few programs, each walking several units
ENGINE_INTERPRETER_SMS = 132         # planning under the interpreter is an H100's
ENGINE_MIN_K_PER_SPLIT = 512         # a K slice shorter than this costs more in partials than it gains
ENGINE_REDUCE_ROWS = 32              # rows per program of the split-K sum (one size: one compile per plan)
# How far a plan's tiles shrink to a small output: not at all on a GPU (each smaller tile would be one more
# compile per dtype in a judge run, for outputs too small for the waste to matter), to 16 under the
# interpreter, where small tiles keep the CPU tests fast.
ENGINE_MIN_TILE = {"cuda": 1 << 30, "cpu": 16}
ENGINE_ACTIVATIONS = ("silu", "gelu", "relu2")


@dataclass(frozen=True)
class EnginePlan:
    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int
    group_m: int = 8
    split_k: int = 1
    warp_specialize: bool = False

    def text(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}/w{self.warps}/s{self.stages}/g{self.group_m}"
                f"/k{self.split_k}/ws{int(self.warp_specialize)}")


def parse_engine_plan(text: str) -> EnginePlan:
    """"128x256x64/w8/s3[/g8][/k2][/ws1]" -> EnginePlan; ValueError names a malformed plan."""
    parts = text.split("/")
    try:
        bm, bn, bk = (int(v) for v in parts[0].split("x"))
        fields = {p.rstrip("0123456789"): int(p[len(p.rstrip("0123456789")):]) for p in parts[1:]}
        return EnginePlan(bm, bn, bk, fields["w"], fields["s"], fields.get("g", 8), fields.get("k", 1),
                          bool(fields.get("ws", 0)))
    except (ValueError, KeyError) as error:
        raise ValueError(f"engine plan {text!r} is not BMxBNxBK/wW/sS[/gG][/kSPLIT][/wsWS]") from error


@triton.jit
def _engine_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of a tile: GROUP_M consecutive tiles go down one tile column (L2 reuse)."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    first_row = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(tl.cdiv(M, BLOCK_M) - first_row, GROUP_M)
    return first_row + (tile_id % tiles_per_group) % group_rows, (tile_id % tiles_per_group) // group_rows


@triton.jit
def _engine_act(x, act):
    """silu (act 0), gelu in its tanh form (1) or relu2 (2) of a float32 tile, chosen at run time: one compile
    serves the three. The sigmoid's exp never overflows."""
    z = tl.where(act == 1, 1.5957691216057308 * (x + 0.044715 * x * x * x), x)     # gelu: x * sigmoid(2u)
    e = tl.exp(-tl.abs(z))
    positive = tl.maximum(x, 0.0)
    return tl.where(act == 2, positive * positive, x * tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)))


@triton.jit
def _engine_pointer_tile(src, off_r, k, k_end, R, stride_r, stride_k, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """A (BLOCK_R, BLOCK_K) tile by pointer loads: rows past R wrap (their results are dropped by the
    store), columns past the K slice's end read as zero."""
    rs = ((off_r + tl.arange(0, BLOCK_R)) % R).to(tl.int64)
    ks = k + tl.arange(0, BLOCK_K)
    return tl.load(src + rs[:, None] * stride_r + ks.to(tl.int64)[None, :] * stride_k, mask=ks[None, :] < k_end,
                   other=0.0)


@triton.jit
def _engine_dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    if UPCAST:      # the interpreter's tl.dot multiplies bfloat16 as raw bits; float32 products of 16-bit values are exact
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _engine_rotary(acc, rows, cols, cos_ptr, sin_ptr, rot_cols, rot_seq, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, HEAD: tl.constexpr):
    """Rotate-half rotary on each HEAD-wide head of the tile whose columns lie below rot_cols (q and k)."""
    halves = acc.reshape(BLOCK_M, BLOCK_N // HEAD, 2, HEAD // 2).permute(0, 1, 3, 2)
    x1, x2 = halves.split()
    pos = (rows % rot_seq).to(tl.int64)
    freq = tl.arange(0, HEAD // 2)
    cos = tl.load(cos_ptr + pos[:, None] * (HEAD // 2) + freq[None, :])[:, None, :]
    sin = tl.load(sin_ptr + pos[:, None] * (HEAD // 2) + freq[None, :])[:, None, :]
    rotated = tl.join(x1 * cos - x2 * sin, x2 * cos + x1 * sin).permute(0, 1, 3, 2).reshape(BLOCK_M, BLOCK_N)
    return tl.where((cols < rot_cols)[None, :], rotated, acc)


@triton.jit
def _engine_epilogue(acc, acc2, rows, cols, M, N, scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn, gate_ptr,
                     stride_gm, stride_gn, cos_ptr, sin_ptr, rot_cols, rot_seq,
                     act, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DUAL: tl.constexpr,
                     ROW_SCALE: tl.constexpr, GATE: tl.constexpr, BIAS: tl.constexpr, ROTARY: tl.constexpr,
                     RESIDUAL: tl.constexpr):
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if ROW_SCALE:
        scale = tl.load(scale_ptr + rows, mask=rows < M, other=0.0)[:, None]
        acc = acc * scale
        if DUAL:
            acc2 = acc2 * scale
    if DUAL:
        acc = _engine_act(acc, act) * acc2
    if GATE:
        g = tl.load(gate_ptr + rows.to(tl.int64)[:, None] * stride_gm + cols.to(tl.int64)[None, :] * stride_gn,
                    mask=inside, other=0.0)
        acc = _engine_act(g.to(tl.float32), act) * acc
    if BIAS:
        acc = acc + tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if ROTARY > 0:
        acc = _engine_rotary(acc, rows, cols, cos_ptr, sin_ptr, rot_cols, rot_seq, BLOCK_M, BLOCK_N, ROTARY)
    if RESIDUAL:
        r = tl.load(res_ptr + rows.to(tl.int64)[:, None] * stride_rm + cols.to(tl.int64)[None, :] * stride_rn,
                    mask=inside, other=0.0)
        acc = acc + r.to(tl.float32)
    return acc


@triton.jit
def _engine_stat(rounded, stat_ptr, rows, cols, tile_n, M, N, stride_stat):
    """Each row's sum of squares of the stored (rounded) tile, in the tile's column slot."""
    kept = tl.where((cols < N)[None, :], rounded.to(tl.float32), 0.0)
    tl.store(stat_ptr + rows.to(tl.int64) * stride_stat + tile_n, tl.sum(kept * kept, axis=1), mask=rows < M)


@triton.jit
def _engine_store(out, c_ptr, stat_ptr, rows, cols, tile_n, M, N, stride_cm, stride_cn, stride_stat,
                  OUT_STAT: tl.constexpr):
    rounded = out.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols.to(tl.int64)[None, :] * stride_cn, rounded,
             mask=(rows[:, None] < M) & (cols[None, :] < N))
    if OUT_STAT:
        _engine_stat(rounded, stat_ptr, rows, cols, tile_n, M, N, stride_stat)


# Sizes and row steps are not specialized on (divisibility by 16): each specialization is one more compile of
# every plan and dtype in the judge's sweep, and TMA operands gain nothing from it.
ENGINE_NOT_SPECIALIZED = ["M", "N", "K", "k_per_split", "splits", "stride_am", "stride_cm", "stride_rm", "stride_rn",
                          "stride_gm", "stride_gn", "stride_stat", "rot_cols", "rot_seq", "act"]


@triton.jit(do_not_specialize=ENGINE_NOT_SPECIALIZED)
def _engine_kernel(a_src, b_src, b2_src, c_dst, ws_ptr, scale_ptr, bias_ptr, res_ptr, gate_ptr, stat_ptr,
                   cos_ptr, sin_ptr, M, N, K, k_per_split, splits, stride_am, stride_ak, stride_bk, stride_bn,
                   stride_cm, stride_cn, stride_rm, stride_rn, stride_gm, stride_gn, stride_stat, rot_cols, rot_seq, act,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   SPLIT: tl.constexpr, A_TMA: tl.constexpr, B_TMA: tl.constexpr, B_NK: tl.constexpr,
                   C_TMA: tl.constexpr, DUAL: tl.constexpr, ROW_SCALE: tl.constexpr,
                   GATE: tl.constexpr, BIAS: tl.constexpr, ROTARY: tl.constexpr, RESIDUAL: tl.constexpr,
                   OUT_STAT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, FLATTEN: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # flatten lets the pipeliner start the next unit's loads during this one's epilogue. Descriptor
    # loads and stores stay in this body (not in helpers) as in the starters Triton 3.6 compiled on an H100.
    for unit in tl.range(tl.program_id(0), tiles * splits, tl.num_programs(0), flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        tile_m, tile_n = _engine_tile(unit % tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        split = unit // tiles
        off_m = tile_m * BLOCK_M
        off_n = tile_n * BLOCK_N
        k_start = split * k_per_split
        k_end = tl.minimum(K, k_start + k_per_split)    # slices hold whole K blocks: TMA reads no other slice's K
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_start, k_end, BLOCK_K):
            if A_TMA:
                a = a_src.load([off_m, k])      # the copy engine zero-fills what lies past M and K
            else:
                a = _engine_pointer_tile(a_src, off_m, k, k_end, M, stride_am, stride_ak, BLOCK_M, BLOCK_K)
            if B_TMA:
                if B_NK:
                    b = b_src.load([off_n, k]).T
                else:
                    b = b_src.load([k, off_n])
            else:
                b = _engine_pointer_tile(b_src, off_n, k, k_end, N, stride_bn, stride_bk, BLOCK_N, BLOCK_K).T
            acc = _engine_dot(a, b, acc, PRECISION, UPCAST)
            if DUAL:
                if B_TMA:
                    if B_NK:
                        b2 = b2_src.load([off_n, k]).T
                    else:
                        b2 = b2_src.load([k, off_n])
                else:
                    b2 = _engine_pointer_tile(b2_src, off_n, k, k_end, N, stride_bn, stride_bk, BLOCK_N, BLOCK_K).T
                acc2 = _engine_dot(a, b2, acc2, PRECISION, UPCAST)
        rows = off_m + tl.arange(0, BLOCK_M)
        cols = off_n + tl.arange(0, BLOCK_N)
        if SPLIT:       # partials (2 * splits, M, N) float32: slice s, then its dual at splits + s
            inside = (rows[:, None] < M) & (cols[None, :] < N)
            offsets = rows.to(tl.int64)[:, None] * N + cols[None, :]
            tl.store(ws_ptr + split.to(tl.int64) * M * N + offsets, acc, mask=inside)
            if DUAL:
                tl.store(ws_ptr + (split + splits).to(tl.int64) * M * N + offsets, acc2, mask=inside)
        else:
            out = _engine_epilogue(acc, acc2, rows, cols, M, N, scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn,
                                   gate_ptr, stride_gm, stride_gn, cos_ptr, sin_ptr, rot_cols, rot_seq, act, BLOCK_M,
                                   BLOCK_N, DUAL, ROW_SCALE, GATE, BIAS, ROTARY, RESIDUAL)
            if C_TMA:
                rounded = out.to(c_dst.dtype)
                c_dst.store([off_m, off_n], rounded)
                if OUT_STAT:
                    _engine_stat(rounded, stat_ptr, rows, cols, tile_n, M, N, stride_stat)
            else:
                _engine_store(out, c_dst, stat_ptr, rows, cols, tile_n, M, N, stride_cm, stride_cn, stride_stat,
                              OUT_STAT)


@triton.jit(do_not_specialize=ENGINE_NOT_SPECIALIZED)
def _engine_reduce_kernel(ws_ptr, c_ptr, scale_ptr, bias_ptr, res_ptr, gate_ptr, stat_ptr, cos_ptr, sin_ptr,
                          M, N, splits, stride_cm, stride_cn, stride_rm, stride_rn, stride_gm, stride_gn, stride_stat,
                          rot_cols, rot_seq, act, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          DUAL: tl.constexpr, ROW_SCALE: tl.constexpr, GATE: tl.constexpr,
                          BIAS: tl.constexpr, ROTARY: tl.constexpr, RESIDUAL: tl.constexpr, OUT_STAT: tl.constexpr):
    """Split-K's second launch: the partials summed slice 0 first (the same bits every run), then the epilogue."""
    tile_n = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    offsets = rows.to(tl.int64)[:, None] * N + cols[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(ws_ptr + tl.cast(s, tl.int64) * M * N + offsets, mask=inside, other=0.0)
        if DUAL:
            acc2 += tl.load(ws_ptr + tl.cast(s + splits, tl.int64) * M * N + offsets, mask=inside, other=0.0)
    out = _engine_epilogue(acc, acc2, rows, cols, M, N, scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn, gate_ptr,
                           stride_gm, stride_gn, cos_ptr, sin_ptr, rot_cols, rot_seq, act, BLOCK_M, BLOCK_N, DUAL,
                           ROW_SCALE, GATE, BIAS, ROTARY, RESIDUAL)
    _engine_store(out, c_ptr, stat_ptr, rows, cols, tile_n, M, N, stride_cm, stride_cn, stride_stat, OUT_STAT)


@triton.jit
def _engine_row_rsqrt_kernel(x_ptr, out_ptr, K, stride_xm, eps, BLOCK: tl.constexpr):
    """out[row] = rsqrt(mean(x[row]^2) + eps) in float32: an RMSNorm's statistic, for ROW_SCALE."""
    row = tl.program_id(0).to(tl.int64)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        ks = k + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride_xm + ks, mask=ks < K, other=0.0).to(tl.float32)
        total += v * v
    tl.store(out_ptr + row, tl.rsqrt(tl.sum(total, axis=0) / K + eps))


# --------------------------------------------------------------------------- the host side
@functools.lru_cache(maxsize=None)
def _engine_device(index: int) -> tuple[int, int, bool]:
    """(shared memory bytes per program, SM count, TMA available) of a GPU."""
    props = triton.runtime.driver.active.utils.get_device_properties(index)
    return props["max_shared_mem"], props["multiprocessor_count"], torch.cuda.get_device_capability(index)[0] >= 9


def _engine_sms(device: torch.device) -> int:
    return _engine_device(device.index if device.index is not None else torch.cuda.current_device())[1] \
        if device.type == "cuda" else ENGINE_INTERPRETER_SMS


def engine_on_gpu(t: torch.Tensor) -> bool:
    """Whether t's kernels run on a GPU (not Triton's CPU interpreter); end_to_end.py compile-count replaces it."""
    return t.device.type == "cuda"


def _engine_address(t: torch.Tensor) -> int:
    """t's first element's address, for alignment checks. torch.compile traces the kernel on fake tensors, which
    have no memory: there it is t's offset into its storage, whose base the allocator aligns to 512 bytes."""
    if is_fake(t):
        return t.storage_offset() * t.element_size()
    return t.data_ptr()


def _engine_tma(t: torch.Tensor) -> bool:
    """Whether TMA can describe the 2-D t as it is: Hopper (or the interpreter), unit last stride, 16-byte rows."""
    if t.dim() != 2 or t.stride(1) != 1 or _engine_address(t) % 16 or (t.stride(0) * t.element_size()) % 16:
        return False
    if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
        return False
    return t.device.type != "cuda" or _engine_device(t.device.index)[2]


def _engine_table_plan(M: int, N: int, K: int, dtype: torch.dtype, kind: str) -> EnginePlan | None:
    """The measured plan at the nearest measured M (log scale; ties to the larger) for this N, K; the other
    16-bit dtype's table where this one has none."""
    name = str(dtype).replace("torch.", "")
    others = [name] + [d for d in ("float16", "bfloat16") if d != name and name != "float32"]
    for dtype_name in others:
        entries = GEMM_TABLE.get(f"{dtype_name}/{kind}/{N}/{K}")
        if entries:
            m, text = min(entries, key=lambda e: (abs(math.log2(max(e[0], 1)) - math.log2(max(M, 1))), -e[0]))
            return parse_engine_plan(text)
    return None


def _engine_default_plan(M: int, N: int, K: int, kind: str, sms: int) -> EnginePlan:
    """No measurement: one plan per kind (each plan a judge run meets is one more compile per dtype, most of
    a job's baseline, and the measured table covers the model's own shapes), with K split while its tiles
    leave SMs idle and each slice keeps ENGINE_MIN_K_PER_SPLIT of K."""
    plan = parse_engine_plan(ENGINE_DEFAULT[kind])
    tiles = -(-M // plan.block_m) * -(-N // plan.block_n)

    def busy(split: int) -> float:     # the share of SM time whole waves of (tile, slice) units keep busy
        return tiles * split / (-(-tiles * split // sms) * sms)
    splits = [s for s in (1, 2, 4, 8) if s == 1 or K // s >= ENGINE_MIN_K_PER_SPLIT]
    split = max(splits, key=lambda s: (busy(s), -s))
    split = split if busy(split) > busy(1) + 0.1 else 1       # partials cost traffic: split only for a clear gain
    return EnginePlan(plan.block_m, plan.block_n, plan.block_k, plan.warps, plan.stages, 8, split, False)


ENGINE_DEFAULT = {"plain": "128x128x64/w8/s4", "dual": "128x128x64/w8/s3"}


def engine_plan(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device, kind: str = "plain",
                overrides: dict | None = None) -> EnginePlan:
    """The plan one call runs: the table's (else the default), with the starter's TUNABLES overrides (a value
    other than "table" replaces the table's), fitted to the shape (tiles no wider than the output needs).
    Cached per shape and overrides."""
    key = (M, N, K, dtype, device, kind, tuple(sorted((overrides or {}).items())))
    known = _ENGINE_PLANS_MADE.get(key)
    if known is not None:
        return known
    o = {name: value for name, value in (overrides or {}).items() if value != "table"}
    base = _engine_table_plan(M, N, K, dtype, kind) or _engine_default_plan(M, N, K, kind, _engine_sms(device))
    tile = parse_engine_plan(o["plan"]) if "plan" in o else base
    block_k = tile.block_k // 2 if dtype == torch.float32 else tile.block_k    # the same bytes per stage
    floor = ENGINE_MIN_TILE["cuda" if device.type == "cuda" else "cpu"]
    fit = [min(b, max(floor, triton.next_power_of_2(max(s, 1)))) for b, s in ((tile.block_m, M), (tile.block_n, N),
                                                                            (block_k, K))]
    split = max(1, min(int(o.get("split_k", base.split_k)), -(-K // fit[2]) if K else 1))
    # Warp-specializing a dual plan of one warpgroup (4 warps) miscompiles with Triton 3.6 on an H200: the
    # compiler fails (128x64x64/w4/s4) or tiles come out non-finite (64x128x64/w4/s4, 64x64x64/w4/s5); the same
    # plans without it, and w8 with it, are right (benchmarks/results/2026-11-30_NVIDIA-H200_gate_s21).
    specialize = (bool(o.get("warp_specialize", base.warp_specialize)) and dtype != torch.float32
                  and not (kind == "dual" and tile.warps < 8))
    made = EnginePlan(*fit, tile.warps, tile.stages, int(o.get("group_m", base.group_m)), split, specialize)
    if len(_ENGINE_PLANS_MADE) > 4096:
        _ENGINE_PLANS_MADE.clear()
    _ENGINE_PLANS_MADE[key] = made
    return made


_ENGINE_PLANS_MADE: dict = {}


def engine_row_rsqrt(x: torch.Tensor, eps: float) -> torch.Tensor:
    """rsqrt(mean(x^2, dim=1) + eps) per row of the 2-D x (unit last stride), float32: ROW_SCALE's input."""
    out = torch.empty((x.shape[0],), dtype=torch.float32, device=x.device)
    block = min(2048, triton.next_power_of_2(max(x.shape[1], 1)))
    _engine_row_rsqrt_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), float(eps), BLOCK=block,
                                            num_warps=max(1, min(8, block // 256)))
    return out


def _engine_b_source(b: torch.Tensor, tma: bool, b_nk: bool, block_n: int, block_k: int):
    """B as the kernel reads it: a descriptor of its (K, N) rows or of B^T's (N, K) rows, else the tensor."""
    if not tma:
        return b
    return TensorDescriptor.from_tensor(b.t(), [block_n, block_k]) if b_nk else \
        TensorDescriptor.from_tensor(b, [block_k, block_n])


def engine_gemm(a: torch.Tensor, b: torch.Tensor, *, b2: torch.Tensor | None = None, act: str = "silu",
                row_scale: torch.Tensor | None = None, gate: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, residual: torch.Tensor | None = None,
                rotary: tuple | None = None, out_stat: bool = False, out_dtype: torch.dtype | None = None,
                plan: EnginePlan | None = None, overrides: dict | None = None):
    """epilogue(a @ b): a (M, K), b (K, N) (a weight W (N, K) passes as W.t()), any strides.

    b2 (K, N): the dual product, act(a @ b) * (a @ b2). row_scale (M,) float32 multiplies
    the rows of the products; gate (M, N): act(gate) * the product; bias (N,); rotary (cos, sin, head_dim,
    rot_cols, seq), cos and sin (seq, head_dim / 2) float32 contiguous; residual (M, N), added last. Returns
    C (M, N); with out_stat, (C, S) where S (M, column tiles) float32 holds the sums of squares of C's rows.
    """
    (M, K), N = a.shape, b.shape[1]
    c = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    p = plan or engine_plan(M, N, K, a.dtype, a.device, "plain" if b2 is None else "dual", overrides)
    block_n = p.block_n if rotary is None else max(p.block_n, rotary[2])     # whole heads per tile
    tiles_n = -(-N // block_n)
    stat = torch.empty((M, tiles_n), dtype=torch.float32, device=a.device) if out_stat else c
    if M == 0 or N == 0:
        return (c, stat) if out_stat else c
    on_gpu = engine_on_gpu(a)
    k_per_split = -(-max(K, 1) // (p.block_k * p.split_k)) * p.block_k
    split = max(1, -(-K // k_per_split))
    if b2 is not None and b2.stride() != b.stride():     # the kernel reads both with one set of strides
        b, b2 = (t.t().contiguous().t() for t in (b, b2))
    sixteen_bit = a.dtype != torch.float32      # float32 takes pointer loads and IEEE products
    b_nk = b.stride(0) == 1 and b.stride(1) != 1
    operands_b = [b] if b2 is None else [b, b2]
    # A and B move by TMA together or not at all: one variant fewer to compile where only one could.
    b_tma = sixteen_bit and _engine_tma(a) and all(_engine_tma(t.t() if b_nk else t) for t in operands_b)
    a_tma = b_tma
    c_tma = b_tma and split == 1 and _engine_tma(c)       # with pointer loads, a pointer store: one variant
    stages = p.stages
    if on_gpu:      # fewer stages where the requested ones would not fit beside the output's staging tile
        shared = _engine_device(a.device.index)[0]
        staging = p.block_m * block_n * c.element_size() if c_tma else 0
        per_stage = (p.block_m + block_n * len(operands_b)) * p.block_k * a.element_size()
        stages = max(1, min(stages, (shared - staging) // per_stage))
    b_src = _engine_b_source(b, b_tma, b_nk, block_n, p.block_k)
    b2_src = b_src if b2 is None else _engine_b_source(b2, b_tma, b_nk, block_n, p.block_k)
    ws = torch.empty((2 * split, M, N), dtype=torch.float32, device=a.device) if split > 1 else c
    cos, sin, head, rot_cols, seq = rotary if rotary is not None else (c, c, 0, 0, 1)
    res = residual if residual is not None else c      # placeholders the kernel never reads
    g = gate if gate is not None else c
    epilogue = dict(DUAL=b2 is not None, ROW_SCALE=row_scale is not None, GATE=gate is not None,
                    BIAS=bias is not None, ROTARY=head, RESIDUAL=residual is not None, OUT_STAT=out_stat)
    tail = (row_scale if row_scale is not None else c, bias if bias is not None else c, res, g, stat, cos, sin)
    rotary_and_act = (rot_cols, seq, ENGINE_ACTIVATIONS.index(act))
    units = -(-M // p.block_m) * tiles_n * split
    programs = min(units, _engine_sms(a.device) if on_gpu else ENGINE_INTERPRETER_PROGRAMS)
    _engine_kernel[(programs,)](
        TensorDescriptor.from_tensor(a, [p.block_m, p.block_k]) if a_tma else a, b_src, b2_src,
        TensorDescriptor.from_tensor(c, [p.block_m, block_n]) if c_tma else c, ws, *tail, M, N, K, k_per_split, split,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), res.stride(0), res.stride(1),
        g.stride(0), g.stride(1), stat.stride(0), *rotary_and_act, BLOCK_M=p.block_m, BLOCK_N=block_n,
        BLOCK_K=p.block_k, GROUP_M=p.group_m, SPLIT=split > 1, A_TMA=a_tma, B_TMA=b_tma, B_NK=b_nk and b_tma, C_TMA=c_tma,
        PRECISION="ieee", UPCAST=not on_gpu, FLATTEN=not p.warp_specialize,
        WARP_SPECIALIZE=p.warp_specialize and on_gpu, num_warps=p.warps, num_stages=stages, **epilogue)
    if split > 1:
        _engine_reduce_kernel[(-(-M // ENGINE_REDUCE_ROWS), tiles_n)](
            ws, c, *tail, M, N, split, c.stride(0), c.stride(1), res.stride(0), res.stride(1), g.stride(0), g.stride(1),
            stat.stride(0), *rotary_and_act, BLOCK_M=ENGINE_REDUCE_ROWS, BLOCK_N=block_n, num_warps=4, **epilogue)
    return (c, stat) if out_stat else c
# ==== GEMM ENGINE: end ====


# --------------------------------------------------------------------------- the norm and the linear
@triton.jit(do_not_specialize=["K", "stride_xm", "stride_nm"])
def _rmsnorm_rows_kernel(x_ptr, g_ptr, n_ptr, K, stride_xm, stride_xk, stride_g, stride_nm, eps,
                         BLOCK: tl.constexpr):
    """n = rmsnorm(x) row by row (the separate norm pass): float32 statistics, rounded to n's dtype once,
    as the unfused norm stores it. A row longer than BLOCK is read twice; the second read hits the cache."""
    row = tl.program_id(0).to(tl.int64)
    sum_sq = tl.zeros((BLOCK,), dtype=tl.float32)
    for k_start in range(0, K, BLOCK):
        ks = (k_start + tl.arange(0, BLOCK)).to(tl.int64)
        v = tl.load(x_ptr + row * stride_xm + ks * stride_xk, mask=ks < K, other=0.0).to(tl.float32)
        sum_sq += v * v
    scale = tl.rsqrt(tl.sum(sum_sq, axis=0) / K + eps)
    for k_start in range(0, K, BLOCK):
        ks = (k_start + tl.arange(0, BLOCK)).to(tl.int64)
        v = tl.load(x_ptr + row * stride_xm + ks * stride_xk, mask=ks < K, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + ks * stride_g, mask=ks < K, other=0.0).to(tl.float32)
        tl.store(n_ptr + row * stride_nm + ks, (v * scale * g).to(n_ptr.dtype.element_ty), mask=ks < K)


def _rmsnorm_rows(x: torch.Tensor, norm_weight: torch.Tensor, eps: float) -> torch.Tensor:
    M, K = x.shape
    n = torch.empty((M, K), dtype=x.dtype, device=x.device)
    # One block size on a GPU, whatever K: each size would be one more compile per dtype in a judge run.
    # The interpreter's cost grows with the block, so there it is no wider than the row.
    block = TUNABLES["NORM_BLOCK"] if engine_on_gpu(x) else min(TUNABLES["NORM_BLOCK"], triton.next_power_of_2(K))
    _rmsnorm_rows_kernel[(M,)](x, norm_weight, n, K, x.stride(0), x.stride(1), norm_weight.stride(0), n.stride(0),
                               float(eps), BLOCK=block, num_warps=max(1, min(8, block // 256)))
    return n


def _overrides() -> dict:
    return {name: TUNABLES[name] for name in ("plan", "split_k", "group_m", "warp_specialize")}


def plan(M: int, N: int, K: int, dtype: torch.dtype = torch.float16, device=None) -> EnginePlan:
    """The engine plan of the GEMM at this shape (public for benchmarks)."""
    return engine_plan(M, N, K, dtype, device or torch.device("cpu"), "plain", _overrides())


def _check_inputs(x, norm_weight, weight) -> None:
    if x.dim() != 2 or norm_weight.dim() != 1 or weight.dim() != 2:
        raise ValueError("rmsnorm_linear: expected 2-D x (M, K), 1-D norm_weight (K,) and 2-D weight (N, K)")
    K = x.shape[1]
    if norm_weight.shape[0] != K or weight.shape[1] != K:
        raise ValueError(f"rmsnorm_linear: with x {tuple(x.shape)} expected norm_weight ({K},) and weight (N, {K}), "
                         f"got {tuple(norm_weight.shape)} and {tuple(weight.shape)}")
    tensors = (x, norm_weight, weight)
    if len({t.dtype for t in tensors}) != 1 or x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"rmsnorm_linear: all inputs must share one dtype of {SUPPORTED_DTYPES}, "
                        f"got {[str(t.dtype) for t in tensors]}")
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"rmsnorm_linear: inputs are on different devices: {[str(t.device) for t in tensors]}")


def kernel_fn(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    _check_inputs(x, norm_weight, weight)
    (M, K), N = x.shape, weight.shape[0]
    if M == 0 or N == 0 or K == 0:
        return torch.zeros((M, N), dtype=x.dtype, device=x.device)
    return engine_gemm(_rmsnorm_rows(x, norm_weight, eps), weight.t(), overrides=_overrides())
