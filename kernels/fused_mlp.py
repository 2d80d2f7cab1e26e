"""Fused MLP starter: the gated MLP (act(x W_gate^T) * (x W_up^T)) W_down^T in two Triton GEMMs.

The first launch computes a tile of the gate projection and the same tile of the up projection
side by side from one read of x, applies the activation and the product in registers, and writes
h (M, F) once, in the input dtype as PyTorch would: the gate and up activations never go to
memory. The second launch is the plain down-projection GEMM h @ W_down^T. Both are the same tiled
kernel (one BLOCK_M x BLOCK_N output tile per program, K pipelined over `num_stages` buffers,
GROUP_M L2 swizzle) and pick their tiles with the same size heuristic. Weights keep nn.Linear's
(out, in) layout and are read through their strides, never transposed in memory.
"""

import functools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "fused_mlp"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# The big-tile config is used when it still gives at least `large_min_tiles` output tiles. The
# gate/up launch gives half of BLOCK_N to each projection, so both launches hold one
# BLOCK_M x BLOCK_N float32 accumulator's worth of registers.
TUNABLES = {
    "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
    "SMALL_BLOCK_M": 64, "SMALL_BLOCK_N": 64, "SMALL_BLOCK_K": 32, "small_num_warps": 4, "small_num_stages": 3,
    "large_min_tiles": 64,
}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 4, 8, 16],
    "num_warps": [4, 8], "num_stages": [2, 3, 4, 5],
    "SMALL_BLOCK_M": [16, 32, 64], "SMALL_BLOCK_N": [32, 64, 128], "SMALL_BLOCK_K": [16, 32, 64],
    "small_num_warps": [2, 4], "small_num_stages": [2, 3, 4],
    "large_min_tiles": [16, 32, 64, 128, 256],
}

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
ACTIVATIONS = ("silu", "gelu", "relu2")


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
def _mlp_gemm_kernel(a_ptr, b_ptr, up_ptr, c_ptr, M, N, K,
                     stride_am, stride_ak, stride_bk, stride_bn, stride_uk, stride_un, stride_cm, stride_cn,
                     GATED: tl.constexpr, ACTIVATION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    """C = A @ B, or with GATED: C = act(A @ B) * (A @ U), both products from the same A slices."""
    tile_m, tile_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # Rows and columns past the edge wrap around instead of being masked: the loads stay unmasked
    # and the duplicated results are dropped by the masked store. Offsets and pointer steps are
    # int64 because M * K, or BLOCK_K times a column-major stride, may pass 2^31.
    rows = ((tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    cols = ((tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks.to(tl.int64)[None, :] * stride_ak
    b_ptrs = b_ptr + ks.to(tl.int64)[:, None] * stride_bk + cols[None, :] * stride_bn
    a_step = tl.cast(stride_ak, tl.int64) * BLOCK_K
    b_step = tl.cast(stride_bk, tl.int64) * BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if GATED:
        up_ptrs = up_ptr + ks.to(tl.int64)[:, None] * stride_uk + cols[None, :] * stride_un
        up_step = tl.cast(stride_uk, tl.int64) * BLOCK_K
        up_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=ks[None, :] < K - k_start, other=0.0)
            b = tl.load(b_ptrs, mask=ks[:, None] < K - k_start, other=0.0)
        if UPCAST:
            # The CPU interpreter's tl.dot multiplies bfloat16 tiles as their raw uint16 bits.
            # Products of 16-bit floats are exact in float32, so upcasting changes no result.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        # "ieee" keeps float32 inputs exact (TF32 would miss float32's tolerance); 16-bit inputs
        # run on the tensor cores either way.
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += a_step
        b_ptrs += b_step
        if GATED:
            if EVEN_K:
                up = tl.load(up_ptrs)
            else:
                up = tl.load(up_ptrs, mask=ks[:, None] < K - k_start, other=0.0)
            if UPCAST:
                up = up.to(tl.float32)
            up_acc = tl.dot(a, up, up_acc, input_precision="ieee")
            up_ptrs += up_step
    if GATED:
        acc = _activation(acc, ACTIVATION) * up_acc
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + out_rows.to(tl.int64)[:, None] * stride_cm + out_cols.to(tl.int64)[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


@functools.lru_cache(maxsize=None)
def _shared_memory_bytes(device_index: int) -> int:
    return triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"]


def _stages_that_fit(requested: int, stage_bytes: int, device: torch.device) -> int:
    """Fewer pipeline stages when the requested ones would not fit in shared memory (big float32 tiles)."""
    if device.type != "cuda":
        return requested
    return max(1, min(requested, _shared_memory_bytes(device.index) // stage_bytes))


def _tile_config(M: int, N: int, gated: bool) -> dict:
    """The big-tile config when the output is big enough to keep enough big tiles, else the small one.

    A gated launch computes two products per tile, so its tiles are half as wide.
    """
    t = TUNABLES
    width = 2 if gated else 1
    big_tiles = triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, t["BLOCK_N"] // width)
    if big_tiles >= t["large_min_tiles"]:
        return {"BLOCK_M": t["BLOCK_M"], "BLOCK_N": t["BLOCK_N"] // width, "BLOCK_K": t["BLOCK_K"],
                "num_warps": t["num_warps"], "num_stages": t["num_stages"]}
    return {"BLOCK_M": t["SMALL_BLOCK_M"], "BLOCK_N": t["SMALL_BLOCK_N"] // width, "BLOCK_K": t["SMALL_BLOCK_K"],
            "num_warps": t["small_num_warps"], "num_stages": t["small_num_stages"]}


def _launch_gemm(a: torch.Tensor, weight: torch.Tensor, up_weight: torch.Tensor | None = None,
                 activation: str | None = None) -> torch.Tensor:
    """a @ weight.T, or act(a @ weight.T) * (a @ up_weight.T) when up_weight is given; weights are (N, K)."""
    M, K = a.shape
    N = weight.shape[0]
    gated = up_weight is not None
    up = up_weight if gated else weight   # the kernel reads no up operand when it is not gated
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    config = _tile_config(M, N, gated)
    # Each stage buffers an A slice and one B slice per product.
    stage_bytes = (config["BLOCK_M"] + (2 if gated else 1) * config["BLOCK_N"]) * config["BLOCK_K"] * a.element_size()
    num_stages = _stages_that_fit(config["num_stages"], stage_bytes, a.device)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    # B = weight.T is read through the weight's strides: (K, N) stride (stride(1), stride(0)).
    _mlp_gemm_kernel[grid](a, weight, up, c, M, N, K, a.stride(0), a.stride(1), weight.stride(1), weight.stride(0),
                           up.stride(1), up.stride(0), c.stride(0), c.stride(1),
                           GATED=gated, ACTIVATION=activation,
                           BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                           GROUP_M=TUNABLES["GROUP_M"], EVEN_K=K % config["BLOCK_K"] == 0,
                           UPCAST=a.device.type == "cpu", num_warps=config["num_warps"], num_stages=num_stages)
    return c


def _check_inputs(x, w_gate, w_up, w_down, activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"fused_mlp: unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    if x.dim() != 2 or w_gate.dim() != 2 or w_up.dim() != 2 or w_down.dim() != 2:
        raise ValueError("fused_mlp: expected 2-D x (M, D), w_gate (F, D), w_up (F, D) and w_down (D, F)")
    D = x.shape[1]
    F = w_gate.shape[0]
    if w_gate.shape != (F, D) or w_up.shape != (F, D) or w_down.shape != (D, F):
        raise ValueError(f"fused_mlp: with x {tuple(x.shape)} expected w_gate and w_up (F, {D}) and w_down ({D}, F), "
                         f"got {tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    tensors = (x, w_gate, w_up, w_down)
    if len({t.dtype for t in tensors}) != 1 or x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"fused_mlp: all inputs must share one dtype of {SUPPORTED_DTYPES}, "
                        f"got {[str(t.dtype) for t in tensors]}")
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"fused_mlp: inputs are on different devices: {[str(t.device) for t in tensors]}")


def kernel_fn(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              activation: str = "silu") -> torch.Tensor:
    _check_inputs(x, w_gate, w_up, w_down, activation)
    if x.shape[0] == 0 or x.shape[1] == 0 or w_gate.shape[0] == 0:
        return torch.zeros((x.shape[0], w_down.shape[0]), dtype=x.dtype, device=x.device)
    hidden = _launch_gemm(x, w_gate, w_up, activation)
    return _launch_gemm(hidden, w_down)
