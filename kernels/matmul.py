"""Matmul starter: C = A @ B on the tensor cores, one output tile per program, in Triton.

Each program owns a BLOCK_M x BLOCK_N tile of C and walks K in BLOCK_K steps, accumulating in
float32 while Triton pipelines the loads over `num_stages` shared-memory buffers. Programs are
numbered in groups of GROUP_M tile rows (the L2 swizzle of the Triton matmul tutorial), so the
tiles that run at the same time share rows of A and columns of B in the L2 cache.

Two configs: big tiles for big outputs, small tiles otherwise (more programs to fill the GPU on a
small output, and quick under the CPU interpreter). kernel_fn picks one from the output size.
"""

import functools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "matmul"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# The big-tile config is used when it still gives at least `large_min_tiles` output tiles.
TUNABLES = {
    "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
    "SMALL_BLOCK_M": 64, "SMALL_BLOCK_N": 64, "SMALL_BLOCK_K": 32, "small_num_warps": 4, "small_num_stages": 3,
    "large_min_tiles": 64,
}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "GROUP_M": [1, 4, 8, 16],
    "num_warps": [4, 8], "num_stages": [2, 3, 4, 5],
    "SMALL_BLOCK_M": [16, 32, 64], "SMALL_BLOCK_N": [16, 32, 64], "SMALL_BLOCK_K": [16, 32, 64],
    "small_num_warps": [2, 4], "small_num_stages": [2, 3, 4],
    "large_min_tiles": [16, 32, 64, 128, 256],
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
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
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


def _tile_config(M: int, N: int) -> dict:
    """The big-tile config when the output is big enough to keep enough big tiles, else the small one."""
    t = TUNABLES
    big_tiles = triton.cdiv(M, t["BLOCK_M"]) * triton.cdiv(N, t["BLOCK_N"])
    if big_tiles >= t["large_min_tiles"]:
        return {"BLOCK_M": t["BLOCK_M"], "BLOCK_N": t["BLOCK_N"], "BLOCK_K": t["BLOCK_K"],
                "num_warps": t["num_warps"], "num_stages": t["num_stages"]}
    return {"BLOCK_M": t["SMALL_BLOCK_M"], "BLOCK_N": t["SMALL_BLOCK_N"], "BLOCK_K": t["SMALL_BLOCK_K"],
            "num_warps": t["small_num_warps"], "num_stages": t["small_num_stages"]}


def _check_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul: expected 2-D a (M, K) and b (K, N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: inner sizes differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"matmul: a and b must share one dtype of {SUPPORTED_DTYPES}, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"matmul: a is on {a.device} but b is on {b.device}")


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _check_inputs(a, b)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    config = _tile_config(M, N)
    stage_bytes = (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"] * a.element_size()
    num_stages = _stages_that_fit(config["num_stages"], stage_bytes, a.device)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                         BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"],
                         GROUP_M=TUNABLES["GROUP_M"], EVEN_K=K % config["BLOCK_K"] == 0,
                         UPCAST=a.device.type == "cpu",
                         num_warps=config["num_warps"], num_stages=num_stages)
    return c
