"""RMSNorm + linear starter: y = rmsnorm(x, g, eps) @ W^T in one Triton GEMM launch.

Unfused, the model writes the normalized activation and reads it back for the linear. Here the
norm folds into the GEMM:

    y[m, n] = rsqrt(mean_k x[m, k]^2 + eps) * sum_k x[m, k] * (g[k] * W[n, k])

- the row's sum of squares accumulates, in float32, from the x tiles the GEMM loads anyway
  (every program walks the whole of K for its rows);
- g multiplies the W tile in float32 before the product, rounded to the input dtype once, as
  PyTorch rounds the normalized activation once (one rounding of a factor near 1 either way).
  Scaling W, not x: x * g rounded to float16 overflows for rows near float16's limit, which the
  judge's "huge rows" case has, while W * g stays small;
- the row scale rsqrt(...) multiplies the float32 accumulator in the epilogue.
The normalized x is never written, and one launch disappears. Tiles come from three shape
buckets by the number of rows: "decode" (a few tokens: narrow tiles, so the weight, the whole
cost, is spread over many programs), "small" and "large"; GROUP_M swizzles tiles for L2 reuse.
Float32 inputs use exact float32 products ("ieee"): the judge holds float32 to 1e-4.
`plan()` names a call's bucket, so the built-in search tries the tunables the job's shapes use first.

A bucket's `norm_pass` "separate" instead writes n = rmsnorm(x) first (one small row kernel) and
runs a persistent GEMM on n whose tiles move by TMA and feed the tensor cores from shared memory;
the inline norm takes every W tile through registers to scale it by g. At many rows the GEMM's
speed decides (see TUNABLES); at a few the launch saved does. The separate pass needs what TMA
needs (Hopper or the interpreter, unit last strides, 16-byte rows); elsewhere the norm stays inline.
The row kernel and the TMA check are kernels/rmsnorm_mlp.py's, copied so that this file stands alone
(an agent edits one kernel file and nothing else).
"""

from typing import NamedTuple

import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "rmsnorm_linear"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# One line per row bucket (tile rows, columns, K step in 16-bit elements, warps, pipeline
# stages); a call with at most decode_max_m rows takes "decode", at most small_max_m "small".
# large_warps is 4, not 8: 1.28x at 4096x2048x2048 and 1.19x at 4096x32000x2048 on an H100
# (benchmarks/tunable_sweep.py, 2026-11-23). The large bucket's separate norm pass: 4 stages, 1.45x
# the inline norm at 4096x2048x2048 (71.8 us against 103.5; benchmarks/results/2026-11-23_NVIDIA-H100_norm_pass/).
TUNABLES = {
    "decode_BLOCK_M": 16, "decode_BLOCK_N": 32, "decode_BLOCK_K": 256, "decode_warps": 4, "decode_stages": 3,
    "small_BLOCK_M": 64, "small_BLOCK_N": 64, "small_BLOCK_K": 64, "small_warps": 4, "small_stages": 4,
    "large_BLOCK_M": 128, "large_BLOCK_N": 128, "large_BLOCK_K": 64, "large_warps": 4, "large_stages": 4,
    "decode_max_m": 16, "small_max_m": 256, "GROUP_M": 8,
    "decode_norm_pass": "inline", "small_norm_pass": "inline", "large_norm_pass": "separate", "NORM_BLOCK": 2048,
}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {
    "decode_BLOCK_M": [16, 32], "decode_BLOCK_N": [16, 32, 64, 128], "decode_BLOCK_K": [64, 128, 256, 512],
    "decode_warps": [2, 4, 8], "decode_stages": [2, 3, 4, 5],
    "small_BLOCK_M": [32, 64, 128], "small_BLOCK_N": [32, 64, 128], "small_BLOCK_K": [32, 64, 128],
    "small_warps": [4, 8], "small_stages": [2, 3, 4, 5],
    "large_BLOCK_M": [64, 128, 256], "large_BLOCK_N": [64, 128, 256], "large_BLOCK_K": [32, 64, 128],
    "large_warps": [4, 8], "large_stages": [2, 3, 4],
    "decode_max_m": [1, 8, 16, 32, 64], "small_max_m": [64, 128, 256, 512, 1024], "GROUP_M": [1, 4, 8, 16],
    "decode_norm_pass": ["inline", "separate"], "small_norm_pass": ["inline", "separate"],
    "large_norm_pass": ["inline", "separate"], "NORM_BLOCK": [512, 1024, 2048, 4096],
}
# Programs per launch of the persistent GEMM under the CPU interpreter: a few, each walking several tiles.
INTERPRETER_PROGRAMS = 3

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of a program: GROUP_M consecutive programs go down one tile column."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    first_row = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_row, GROUP_M)
    tile_m = first_row + (tile_id % tiles_per_group) % group_rows
    tile_n = (tile_id % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def _rmsnorm_linear_kernel(x_ptr, g_ptr, w_ptr, y_ptr, M, N, K, eps,
                           stride_xm, stride_xk, stride_g, stride_wn, stride_wk, stride_ym, stride_yn,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows and columns past the edge wrap around instead of being masked: the loads stay unmasked,
    # a wrapped row has its own (correct) sum of squares, and the masked store drops it. Offsets
    # are int64 because M * K may pass 2^31.
    rows = ((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    cols = ((tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + ks.to(tl.int64)[None, :] * stride_xk
    w_ptrs = w_ptr + ks.to(tl.int64)[:, None] * stride_wk + cols[None, :] * stride_wn    # W^T's tile
    g_ptrs = g_ptr + ks.to(tl.int64) * stride_g
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs)
            w_t = tl.load(w_ptrs)
            g = tl.load(g_ptrs)
        else:
            in_k = ks < K - k_start
            x = tl.load(x_ptrs, mask=in_k[None, :], other=0.0)
            w_t = tl.load(w_ptrs, mask=in_k[:, None], other=0.0)
            g = tl.load(g_ptrs, mask=in_k, other=0.0)
        xf = x.to(tl.float32)
        sum_sq += tl.sum(xf * xf, axis=1)
        w_scaled = w_t.to(tl.float32) * g.to(tl.float32)[:, None]
        if UPCAST:
            # The CPU interpreter's tl.dot multiplies bfloat16 tiles as their raw uint16 bits;
            # in float32 the products are exact, and W * g is left unrounded.
            acc = tl.dot(xf, w_scaled, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w_scaled.to(x.dtype), acc, input_precision="ieee")
        x_ptrs += tl.cast(stride_xk, tl.int64) * BLOCK_K
        w_ptrs += tl.cast(stride_wk, tl.int64) * BLOCK_K
        g_ptrs += tl.cast(stride_g, tl.int64) * BLOCK_K
    inv_rms = tl.rsqrt(sum_sq / K + eps)
    y = acc * inv_rms[:, None]
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + out_rows.to(tl.int64)[:, None] * stride_ym + out_cols.to(tl.int64)[None, :] * stride_yn
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


@triton.jit
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


@triton.jit
def _linear_tma_kernel(desc_a, desc_w, desc_y, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    """y = a @ W^T, one program per SM walking the output tiles; the copy engine zero-fills ragged edges."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # flatten lets the pipeliner start the next tile's loads during this tile's epilogue.
    for tile_id in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            a = desc_a.load([tile_m * BLOCK_M, k_start])
            w = desc_w.load([tile_n * BLOCK_N, k_start])
            if UPCAST:      # the interpreter's tl.dot multiplies bfloat16 as raw bits; float32 is exact
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, w.T, acc, input_precision="ieee")
        desc_y.store([tile_m * BLOCK_M, tile_n * BLOCK_N], acc.to(desc_y.dtype))


@functools.lru_cache(maxsize=None)
def _device_properties(device_index: int) -> dict:
    return triton.runtime.driver.active.utils.get_device_properties(device_index)


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """TMA needs Hopper or later (or the interpreter), a unit last stride, and 16-byte-aligned rows and bases."""
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    device = tensors[0].device
    return device.type == "cpu" or torch.cuda.get_device_capability(device)[0] >= 9


def _separate(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, eps: float,
              config: dict) -> None:
    """The separate norm pass: n = rmsnorm(x), then y = n @ W^T by the persistent TMA GEMM."""
    (M, K), N = x.shape, weight.shape[0]
    n = torch.empty((M, K), dtype=x.dtype, device=x.device)
    block = min(TUNABLES["NORM_BLOCK"], triton.next_power_of_2(K))
    _rmsnorm_rows_kernel[(M,)](x, norm_weight, n, K, x.stride(0), x.stride(1), norm_weight.stride(0), n.stride(0),
                               float(eps), BLOCK=block, num_warps=max(1, min(8, block // 256)))
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    stages = config["num_stages"]
    if x.is_cuda:
        # Fewer stages where the requested ones would not fit beside the output tile's staging buffer.
        shared_bytes = _device_properties(x.device.index)["max_shared_mem"]
        stages = max(1, min(stages, (shared_bytes - bm * bn * y.element_size()) // ((bm + bn) * bk * x.element_size())))
    programs = min(tiles, INTERPRETER_PROGRAMS if x.device.type == "cpu" else
                   _device_properties(x.device.index)["multiprocessor_count"])
    _linear_tma_kernel[(programs,)](TensorDescriptor.from_tensor(n, [bm, bk]),
                                    TensorDescriptor.from_tensor(weight, [bn, bk]),
                                    TensorDescriptor.from_tensor(y, [bm, bn]), M, N, K,
                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=TUNABLES["GROUP_M"],
                                    UPCAST=not x.is_cuda, num_warps=config["num_warps"], num_stages=stages)


def _fit(block: int, size: int) -> int:
    """A tile side no wider than the output needs (a power of two, at least 16 for tl.dot)."""
    return min(block, max(16, triton.next_power_of_2(size)))


def bucket_of(M: int) -> str:
    """Which bucket of TUNABLES a call with M rows takes."""
    return "decode" if M <= TUNABLES["decode_max_m"] else "small" if M <= TUNABLES["small_max_m"] else "large"


class Plan(NamedTuple):
    bucket: str
    config: dict


def plan(M: int, N: int, K: int, dtype: torch.dtype = torch.float16, device=None) -> Plan:
    """The bucket and tile of one call (the built-in search reads the bucket, to try its tunables first)."""
    return Plan(bucket_of(M), tile_config(M, N, K, dtype))


def tile_config(M: int, N: int, K: int, dtype: torch.dtype) -> dict:
    """The bucket's tile for this many rows, clamped to the output and to K."""
    t = TUNABLES
    bucket = bucket_of(M)
    # BLOCK_K is in 16-bit elements: float32 halves it, keeping the bytes per pipeline stage.
    block_k = t[f"{bucket}_BLOCK_K"] // (2 if dtype == torch.float32 else 1)
    return {"BLOCK_M": _fit(t[f"{bucket}_BLOCK_M"], M), "BLOCK_N": _fit(t[f"{bucket}_BLOCK_N"], N),
            "BLOCK_K": _fit(max(16, block_k), K), "num_warps": t[f"{bucket}_warps"],
            "num_stages": t[f"{bucket}_stages"]}


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
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    config = tile_config(M, N, K, x.dtype)
    if TUNABLES[f"{bucket_of(M)}_norm_pass"] == "separate" and _tma_ready(x, weight, y):
        _separate(x, norm_weight, weight, y, eps, config)
        return y
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    _rmsnorm_linear_kernel[grid](x, norm_weight, weight, y, M, N, K, float(eps),
                                 x.stride(0), x.stride(1), norm_weight.stride(0), weight.stride(0), weight.stride(1),
                                 y.stride(0), y.stride(1),
                                 BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                                 GROUP_M=TUNABLES["GROUP_M"], EVEN_K=K % config["BLOCK_K"] == 0,
                                 UPCAST=not x.is_cuda, num_warps=config["num_warps"],
                                 num_stages=config["num_stages"])
    return y
