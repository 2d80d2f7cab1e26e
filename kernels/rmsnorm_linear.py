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
"""

from typing import NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm_linear"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# One line per row bucket (tile rows, columns, K step in 16-bit elements, warps, pipeline
# stages); a call with at most decode_max_m rows takes "decode", at most small_max_m "small".
# large_warps is 4, not 8: 1.28x at 4096x2048x2048 and 1.19x at 4096x32000x2048 on an H100
# (benchmarks/tunable_sweep.py, 2026-11-23).
TUNABLES = {
    "decode_BLOCK_M": 16, "decode_BLOCK_N": 32, "decode_BLOCK_K": 256, "decode_warps": 4, "decode_stages": 3,
    "small_BLOCK_M": 64, "small_BLOCK_N": 64, "small_BLOCK_K": 64, "small_warps": 4, "small_stages": 4,
    "large_BLOCK_M": 128, "large_BLOCK_N": 128, "large_BLOCK_K": 64, "large_warps": 4, "large_stages": 3,
    "decode_max_m": 16, "small_max_m": 256, "GROUP_M": 8,
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
}

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
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    _rmsnorm_linear_kernel[grid](x, norm_weight, weight, y, M, N, K, float(eps),
                                 x.stride(0), x.stride(1), norm_weight.stride(0), weight.stride(0), weight.stride(1),
                                 y.stride(0), y.stride(1),
                                 BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                                 GROUP_M=TUNABLES["GROUP_M"], EVEN_K=K % config["BLOCK_K"] == 0,
                                 UPCAST=not x.is_cuda, num_warps=config["num_warps"],
                                 num_stages=config["num_stages"])
    return y
