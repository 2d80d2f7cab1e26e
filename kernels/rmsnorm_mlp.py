"""RMSNorm + gated MLP starter: the MLP of a normalized x, without the normalized x ever going to memory.

out = (act(n W_gate^T) * (n W_up^T)) W_down^T with n = rmsnorm(x, g, eps) = r * x * g, where
r = rsqrt(mean(x^2) + eps) is one scalar per row. Three Triton GEMM launches, against four for the
unfused pair (the norm, then the MLP):

1. G = r * ((x * g) W_gate^T): the norm is folded into the GEMM. Each x tile it loads anyway is
   squared and summed into the row's sum of squares (float32), and multiplied by the matching
   slice of g before the MMA; r is known once the K loop ends, and since it is a per-row scalar,
   (r x) W^T = r (x W^T): the epilogue scales the accumulator's rows by it.
2. H = act(G) * (r * ((x * g) W_up^T)): the same GEMM, whose epilogue also reads the matching tile
   of G and applies the activation and the product in registers.
3. out = H W_down^T.

Why g goes onto the x tiles, not into the weights (g * W cached per weight version): a cache would
hold a second copy of two thirds of the MLP's weights, and be a second source of truth to keep in
step with them; the tile product is a few register operations per loaded element. Each tile
column recomputes its rows' sum of squares from the x tiles it loads: no extra memory traffic and
no reduction across programs. The product is rounded to x's dtype for the tensor cores, as the
unfused norm rounds its output; so that it never overflows float16 (x near 4e4 with g near 2 would),
the tiles take x * g / b with b = max(1, max |g|), read by each program once, and the epilogue
multiplies b back into the row scale.

Every launch is one GEMM kernel: a BLOCK_M x BLOCK_N output tile at a time, K pipelined over
`num_stages` shared-memory buffers, GROUP_M L2 swizzle, and a persistent grid (one program per
SM walking the tiles). Weights keep nn.Linear's (out, in) layout and are read through their strides.
On Hopper, when every operand has a unit last stride and 16-byte-aligned rows, tiles move by TMA
(tensor descriptors; the copy engine also zero-fills ragged edges); otherwise by pointer loads.
The GEMM machinery is kernels/fused_mlp.py's, copied so that this file stands alone.

`norm_pass` "separate" (per tile config) instead writes n = rmsnorm(x) first, with one small row
kernel, and runs the three GEMMs on n without the norm: four launches and one extra write and read
of x's size, but the GEMMs then feed the tensor cores from shared memory as TMA loaded them, where
the inline norm takes every x tile through registers first. At many rows the GEMMs' speed decides
(see the measurement at TUNABLES); at a few rows the launch saved does.
"""

import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "rmsnorm_mlp"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# The big-tile config is used when it still gives at least `large_min_tiles` output tiles. The
# launch with the gate epilogue holds a G tile next to its accumulator, so it has its own width
# and depth (EPILOGUE_BLOCK_N, epilogue_num_stages) to stay within registers and shared memory.
# The first two launches also carry the norm (x tiles through registers, one float32 per row).
# norm_pass / small_norm_pass: "inline" (the norm inside the first two GEMMs) or "separate" (a row
# kernel writes the normalized x first) for calls that take the big-tile or the small-tile config.
# Measured on an H100 at M=4096, D=2048, F=5632 (benchmarks/results/2026-11-23_NVIDIA-H100_norm_pass/):
# the separate pass 505 us against the inline norm's 741, and 486 us with 4 stages; at M=256 the
# inline norm stays ahead (274 us against 334).
TUNABLES = {
    "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4,
    "EPILOGUE_BLOCK_N": 128, "epilogue_num_stages": 4,
    "SMALL_BLOCK_M": 64, "SMALL_BLOCK_N": 64, "SMALL_BLOCK_K": 32, "small_num_warps": 4, "small_num_stages": 3,
    "large_min_tiles": 64, "norm_pass": "separate", "small_norm_pass": "inline", "NORM_BLOCK": 2048,
}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 4, 8, 16],
    "num_warps": [4, 8], "num_stages": [2, 3, 4, 5],
    "EPILOGUE_BLOCK_N": [64, 128, 256], "epilogue_num_stages": [2, 3, 4, 5],
    "SMALL_BLOCK_M": [16, 32, 64], "SMALL_BLOCK_N": [32, 64, 128], "SMALL_BLOCK_K": [16, 32, 64],
    "small_num_warps": [2, 4], "small_num_stages": [2, 3, 4],
    "large_min_tiles": [16, 32, 64, 128, 256], "norm_pass": ["inline", "separate"],
    "small_norm_pass": ["inline", "separate"], "NORM_BLOCK": [512, 1024, 2048, 4096],
}

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = ("silu", "gelu", "relu2")
# Programs per launch under the CPU interpreter: a few, so that each walks several tiles as on a GPU.
INTERPRETER_PROGRAMS = 3


@triton.jit
def _grouped_tile(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(tile row, tile column) of a tile: GROUP_M consecutive tiles go down one tile column."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    first_row = (tile_id // tiles_per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_row, GROUP_M)
    tile_m = first_row + (tile_id % tiles_per_group) % group_rows
    tile_n = (tile_id % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def _sigmoid(z):
    # exp of a non-positive number never overflows, whatever the size of z.
    e = tl.exp(-tl.abs(z))
    return tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _activation(x, ACTIVATION: tl.constexpr):
    """silu, gelu (tanh approximation) or relu2 of a float32 tile."""
    if ACTIVATION == "silu":
        return x * _sigmoid(x)
    elif ACTIVATION == "gelu":
        # 0.5 * (1 + tanh(u)) == sigmoid(2u); 1.5957691216057308 is 2 * sqrt(2 / pi).
        return x * _sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    else:
        positive = tl.maximum(x, 0.0)
        return positive * positive


@triton.jit
def _gate_epilogue(acc, g_ptr, stride_gm, stride_gn, out_rows, out_cols, M, N, ACTIVATION: tl.constexpr):
    """act(G) * acc for this tile: G is read in the input dtype and rounded as PyTorch would have stored it."""
    g_ptrs = g_ptr + out_rows.to(tl.int64)[:, None] * stride_gm + out_cols.to(tl.int64)[None, :] * stride_gn
    g = tl.load(g_ptrs, mask=(out_rows[:, None] < M) & (out_cols[None, :] < N), other=0.0)
    return _activation(g.to(tl.float32), ACTIVATION) * acc


@triton.jit
def _norm_weight_bound(norm_ptr, stride_norm, K, BLOCK_K: tl.constexpr):
    """max(1, max |norm weight|): x tiles are multiplied by weight / bound, so |x * weight / bound| <= |x|
    never overflows x's dtype; the row scale multiplies the bound back. The weight is K elements, read once."""
    bound = tl.full((BLOCK_K,), 1.0, tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + tl.arange(0, BLOCK_K)
        weight = tl.load(norm_ptr + ks.to(tl.int64) * stride_norm, mask=ks < K, other=0.0)
        bound = tl.maximum(bound, tl.abs(weight.to(tl.float32)))
    return tl.max(bound, axis=0)


@triton.jit
def _normed_tile(a, norm_ptr, stride_norm, k_start, K, sum_sq, inverse_bound, BLOCK_K: tl.constexpr,
                 ROUND: tl.constexpr):
    """(the x tile times its slice of norm weight / bound, the rows' sums of squares including this tile).

    Squares are summed in float32: a row of 16-bit values near 1e3 already overflows float16.
    With ROUND the product is rounded to x's dtype for the tensor cores (not for bfloat16 under
    the interpreter, which rounds it by truncation); dividing by the bound keeps it in range.
    """
    ks = k_start + tl.arange(0, BLOCK_K)
    weight = tl.load(norm_ptr + ks.to(tl.int64) * stride_norm, mask=ks < K, other=0.0).to(tl.float32)
    a32 = a.to(tl.float32)
    sum_sq += tl.sum(a32 * a32, axis=1)
    scaled = a32 * (weight * inverse_bound)[None, :]
    if ROUND:
        scaled = scaled.to(a.dtype)
    return scaled, sum_sq


@triton.jit
def _row_scale(acc, sum_sq, K, eps, bound):
    """The accumulator's rows times rsqrt(mean square + eps) and the weight's bound: the norm's per-row
    factor, applied after the GEMM."""
    return acc * (bound * tl.rsqrt(sum_sq / K + eps))[:, None]


@triton.jit
def _gemm_tma_kernel(desc_a, desc_w, desc_c, g_ptr, stride_gm, stride_gn, norm_ptr, stride_norm, eps, M, N, K,
                     NORM: tl.constexpr, GATE_EPILOGUE: tl.constexpr, ACTIVATION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, UPCAST: tl.constexpr, ROUND: tl.constexpr):
    """C = A @ W^T; with NORM, A is rmsnorm(A) over its K columns; with GATE_EPILOGUE, C = act(G) * C.

    W is (N, K) like an nn.Linear weight.
    """
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    bound = _norm_weight_bound(norm_ptr, stride_norm, K, BLOCK_K) if NORM else 1.0
    # flatten lets the pipeliner start the next tile's loads during this tile's epilogue.
    for tile_id in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            a = desc_a.load([tile_m * BLOCK_M, k_start])
            w = desc_w.load([tile_n * BLOCK_N, k_start])
            if NORM:
                # Columns past K are zero-filled by the copy engine: they add nothing to sum_sq.
                a, sum_sq = _normed_tile(a, norm_ptr, stride_norm, k_start, K, sum_sq, 1.0 / bound, BLOCK_K, ROUND)
            if UPCAST:
                # The CPU interpreter's tl.dot multiplies bfloat16 tiles as their raw uint16 bits.
                # Products of 16-bit floats are exact in float32, so upcasting changes no result.
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            # "ieee" keeps float32 inputs exact (TF32 would miss float32's tolerance); 16-bit
            # inputs run on the tensor cores either way.
            acc = tl.dot(a, w.T, acc, input_precision="ieee")
        if NORM:
            acc = _row_scale(acc, sum_sq, K, eps, bound)
        if GATE_EPILOGUE:
            out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
            out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc = _gate_epilogue(acc, g_ptr, stride_gm, stride_gn, out_rows, out_cols, M, N, ACTIVATION)
        desc_c.store([tile_m * BLOCK_M, tile_n * BLOCK_N], acc.to(desc_c.dtype))


@triton.jit
def _gemm_pointer_kernel(a_ptr, w_ptr, c_ptr, g_ptr, norm_ptr, M, N, K, stride_am, stride_ak, stride_wn, stride_wk,
                         stride_cm, stride_cn, stride_gm, stride_gn, stride_norm, eps,
                         NORM: tl.constexpr, GATE_EPILOGUE: tl.constexpr, ACTIVATION: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr,
                         ROUND: tl.constexpr):
    """The same GEMM for operands TMA cannot describe (any strides), with pointer loads."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    bound = _norm_weight_bound(norm_ptr, stride_norm, K, BLOCK_K) if NORM else 1.0
    ks = tl.arange(0, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        tile_m, tile_n = _grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        # Rows and columns past the edge wrap around instead of being masked: the loads stay
        # unmasked and the duplicated results are dropped by the masked store. Offsets and steps
        # are int64 because M * K, or BLOCK_K times a column-major stride, may pass 2^31.
        rows = ((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
        cols = ((tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks.to(tl.int64)[None, :] * stride_ak
        w_ptrs = w_ptr + ks.to(tl.int64)[:, None] * stride_wk + cols[None, :] * stride_wn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        sum_sq = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            if EVEN_K:
                a = tl.load(a_ptrs)
                w_t = tl.load(w_ptrs)
            else:
                a = tl.load(a_ptrs, mask=ks[None, :] < K - k_start, other=0.0)
                w_t = tl.load(w_ptrs, mask=ks[:, None] < K - k_start, other=0.0)
            if NORM:
                # Masked columns load as zero; wrapped rows sum another row's squares, but their
                # results are dropped by the masked store.
                a, sum_sq = _normed_tile(a, norm_ptr, stride_norm, k_start, K, sum_sq, 1.0 / bound, BLOCK_K, ROUND)
            if UPCAST:
                a = a.to(tl.float32)
                w_t = w_t.to(tl.float32)
            acc = tl.dot(a, w_t, acc, input_precision="ieee")
            a_ptrs += tl.cast(stride_ak, tl.int64) * BLOCK_K
            w_ptrs += tl.cast(stride_wk, tl.int64) * BLOCK_K
        out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if NORM:
            acc = _row_scale(acc, sum_sq, K, eps, bound)
        if GATE_EPILOGUE:
            acc = _gate_epilogue(acc, g_ptr, stride_gm, stride_gn, out_rows, out_cols, M, N, ACTIVATION)
        c_ptrs = c_ptr + out_rows.to(tl.int64)[:, None] * stride_cm + out_cols.to(tl.int64)[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


@triton.jit
def _rmsnorm_rows_kernel(x_ptr, norm_ptr, n_ptr, K, stride_xm, stride_xk, stride_norm, stride_nm, eps,
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
        weight = tl.load(norm_ptr + ks * stride_norm, mask=ks < K, other=0.0).to(tl.float32)
        tl.store(n_ptr + row * stride_nm + ks, (v * scale * weight).to(n_ptr.dtype.element_ty), mask=ks < K)


def _rmsnorm_rows(x: torch.Tensor, norm_weight: torch.Tensor, eps: float) -> torch.Tensor:
    M, K = x.shape
    n = torch.empty((M, K), dtype=x.dtype, device=x.device)
    block = min(TUNABLES["NORM_BLOCK"], triton.next_power_of_2(K))
    _rmsnorm_rows_kernel[(M,)](x, norm_weight, n, K, x.stride(0), x.stride(1), norm_weight.stride(0), n.stride(0),
                               float(eps), BLOCK=block, num_warps=max(1, min(8, block // 256)))
    return n


def _norm_pass(M: int, N: int) -> str:
    """"inline" or "separate": the norm_pass of the tile config the first GEMM of M rows takes."""
    t = TUNABLES
    large = triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, t["BLOCK_N"]) >= t["large_min_tiles"]
    return t["norm_pass"] if large else t["small_norm_pass"]


@functools.lru_cache(maxsize=None)
def _device_limits(device_index: int) -> tuple[int, int, bool]:
    """(shared memory bytes per program, SM count, TMA available) of a GPU."""
    properties = triton.runtime.driver.active.utils.get_device_properties(device_index)
    tma = torch.cuda.get_device_capability(device_index)[0] >= 9
    return properties["max_shared_mem"], properties["multiprocessor_count"], tma


def _tile_config(M: int, N: int, gate_epilogue: bool) -> dict:
    """The big-tile config when the output is big enough to keep enough big tiles, else the small one."""
    t = TUNABLES
    block_n = t["EPILOGUE_BLOCK_N"] if gate_epilogue else t["BLOCK_N"]
    if triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, block_n) >= t["large_min_tiles"]:
        return {"BLOCK_M": t["BLOCK_M"], "BLOCK_N": block_n, "BLOCK_K": t["BLOCK_K"], "num_warps": t["num_warps"],
                "num_stages": t["epilogue_num_stages"] if gate_epilogue else t["num_stages"]}
    return {"BLOCK_M": t["SMALL_BLOCK_M"], "BLOCK_N": t["SMALL_BLOCK_N"], "BLOCK_K": t["SMALL_BLOCK_K"],
            "num_warps": t["small_num_warps"], "num_stages": t["small_num_stages"]}


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """TMA needs Hopper or later (or the interpreter), a unit last stride, and 16-byte-aligned rows and bases."""
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            return False
    return tensors[0].device.type == "cpu" or _device_limits(tensors[0].device.index)[2]


def _gemm(a: torch.Tensor, weight: torch.Tensor, gate: torch.Tensor | None = None, activation: str = "silu",
          out_dtype: torch.dtype | None = None, norm_weight: torch.Tensor | None = None,
          eps: float = 0.0) -> torch.Tensor:
    """a @ weight.T, with a first RMS-normalized by norm_weight (K,) when that is given, and times
    act(gate) when gate (M, N) is given; weight is (N, K)."""
    M, K = a.shape
    N = weight.shape[0]
    c = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    config = _tile_config(M, N, gate is not None)
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    num_stages = config["num_stages"]
    if a.device.type == "cuda":
        shared_bytes, sm_count, _ = _device_limits(a.device.index)
        # Fewer stages when the requested ones would not fit beside the output tile's staging
        # buffer (twice that with the gate epilogue, whose G tile goes through shared memory).
        staging = (2 if gate is not None else 1) * bm * bn * a.element_size()
        num_stages = max(1, min(num_stages, (shared_bytes - staging) // ((bm + bn) * bk * a.element_size())))
        programs = min(tiles, sm_count)
    else:
        programs = min(tiles, INTERPRETER_PROGRAMS)
    g = c if gate is None else gate   # the kernel reads no gate when there is no epilogue
    norm = weight[0] if norm_weight is None else norm_weight   # nor a norm weight when there is no norm
    common = dict(NORM=norm_weight is not None, GATE_EPILOGUE=gate is not None, ACTIVATION=activation, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                  GROUP_M=TUNABLES["GROUP_M"], UPCAST=a.device.type == "cpu",
                  ROUND=not (a.device.type == "cpu" and a.dtype == torch.bfloat16),
                  num_warps=config["num_warps"], num_stages=num_stages)
    if _tma_ready(a, weight, c):
        _gemm_tma_kernel[(programs,)](TensorDescriptor.from_tensor(a, [bm, bk]),
                                      TensorDescriptor.from_tensor(weight, [bn, bk]),
                                      TensorDescriptor.from_tensor(c, [bm, bn]), g, g.stride(0), g.stride(1),
                                      norm, norm.stride(0), float(eps), M, N, K, **common)
    else:
        _gemm_pointer_kernel[(programs,)](a, weight, c, g, norm, M, N, K, a.stride(0), a.stride(1),
                                          weight.stride(0), weight.stride(1), c.stride(0), c.stride(1),
                                          g.stride(0), g.stride(1), norm.stride(0), float(eps),
                                          EVEN_K=K % bk == 0, **common)
    return c


def _check_inputs(x, norm_weight, w_gate, w_up, w_down, eps, activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"rmsnorm_mlp: unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"rmsnorm_mlp: eps must be a number >= 0, got {eps!r}")
    if x.dim() != 2 or norm_weight.dim() != 1 or w_gate.dim() != 2 or w_up.dim() != 2 or w_down.dim() != 2:
        raise ValueError("rmsnorm_mlp: expected 2-D x (M, D), 1-D norm_weight (D,), "
                         "w_gate (F, D), w_up (F, D) and w_down (D, F)")
    D = x.shape[1]
    F = w_gate.shape[0]
    if norm_weight.shape != (D,):
        raise ValueError(f"rmsnorm_mlp: with x {tuple(x.shape)} expected norm_weight ({D},), "
                         f"got {tuple(norm_weight.shape)}")
    if w_gate.shape != (F, D) or w_up.shape != (F, D) or w_down.shape != (D, F):
        raise ValueError(f"rmsnorm_mlp: with x {tuple(x.shape)} expected w_gate and w_up (F, {D}) and "
                         f"w_down ({D}, F), got {tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    tensors = (x, norm_weight, w_gate, w_up, w_down)
    if len({t.dtype for t in tensors}) != 1 or x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"rmsnorm_mlp: all inputs must share one dtype of {SUPPORTED_DTYPES}, "
                        f"got {[str(t.dtype) for t in tensors]}")
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"rmsnorm_mlp: inputs are on different devices: {[str(t.device) for t in tensors]}")


def kernel_fn(x: torch.Tensor, norm_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
              w_down: torch.Tensor, eps: float = 1e-6, activation: str = "silu") -> torch.Tensor:
    _check_inputs(x, norm_weight, w_gate, w_up, w_down, eps, activation)
    if x.shape[0] == 0 or x.shape[1] == 0 or w_gate.shape[0] == 0:
        return torch.zeros((x.shape[0], w_down.shape[0]), dtype=x.dtype, device=x.device)
    # G is stored in the input dtype, as PyTorch stores the gate projection, except under the CPU
    # interpreter: it rounds bfloat16 by truncation, which doubles the rounding error of G.
    gate_dtype = torch.float32 if x.device.type == "cpu" else x.dtype
    if _norm_pass(x.shape[0], w_gate.shape[0]) == "separate":
        x, norm_weight = _rmsnorm_rows(x, norm_weight, eps), None
    gate = _gemm(x, w_gate, out_dtype=gate_dtype, norm_weight=norm_weight, eps=eps)
    hidden = _gemm(x, w_up, gate=gate, activation=activation, norm_weight=norm_weight, eps=eps)
    return _gemm(hidden, w_down)
