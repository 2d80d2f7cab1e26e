"""Rotary embedding starter: rotate-half RoPE of (B, H, S, D) x with (S, D/2) cos and sin, in Triton.

Each program takes a block of positions for a group of heads of one batch entry: it loads the
cos and sin rows of its positions once and reuses them for every head in the group, and it
reads both halves of each head row, so x is read once and written once. x streams through L2
marked evict-first while the cos and sin tables, which programs share, are kept (evict-last).
One program per tile, with few registers, lets four 16-warp programs share a multiprocessor (a
persistent grid that pipelines tiles was measured slower: see docs/notes/memory_bound.md).
Arithmetic is in float32.
x may be any strided view whose last dimension is contiguous (a transposed (B, S, H, D)
projection, say); the output is a fresh contiguous tensor, like the reference's.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rotary_embedding"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# HEADS_PER_PROGRAM: heads sharing one load of cos and sin.
# TILE_ELEMS: elements of each half of x per program; positions per program follow from it.
# ELEMS_PER_THREAD and MAX_NUM_WARPS set num_warps from the tile size.
TUNABLES = {"HEADS_PER_PROGRAM": 8, "TILE_ELEMS": 4096, "ELEMS_PER_THREAD": 16, "MAX_NUM_WARPS": 16}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"HEADS_PER_PROGRAM": [1, 2, 4, 8, 16, 32], "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
                   "ELEMS_PER_THREAD": [4, 8, 16, 32], "MAX_NUM_WARPS": [4, 8, 16, 32]}


@triton.jit
def _rotate_half(x_ptr, cos_ptr, sin_ptr, out_ptr, n_heads, seq_len, half,
                 x_stride_b, x_stride_h, x_stride_s, out_stride_b, out_stride_h, out_stride_s,
                 cos_stride_s, sin_stride_s,
                 HEADS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr):
    positions = tl.program_id(0).to(tl.int64) * BLOCK_S + tl.arange(0, BLOCK_S)
    heads = tl.program_id(1).to(tl.int64) * HEADS + tl.arange(0, HEADS)
    batch = tl.program_id(2).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)

    table_mask = (positions < seq_len)[:, None] & (dims < half)[None, :]
    cos = tl.load(cos_ptr + positions[:, None] * cos_stride_s + dims[None, :], mask=table_mask, other=0.0,
                  eviction_policy="evict_last")
    sin = tl.load(sin_ptr + positions[:, None] * sin_stride_s + dims[None, :], mask=table_mask, other=0.0,
                  eviction_policy="evict_last")
    cos = cos.to(tl.float32)[None, :, :]
    sin = sin.to(tl.float32)[None, :, :]

    mask = (heads < n_heads)[:, None, None] & table_mask[None, :, :]
    x_first = (x_ptr + batch * x_stride_b + heads[:, None, None] * x_stride_h
               + positions[None, :, None] * x_stride_s + dims[None, None, :])
    out_first = (out_ptr + batch * out_stride_b + heads[:, None, None] * out_stride_h
                 + positions[None, :, None] * out_stride_s + dims[None, None, :])
    x1 = tl.load(x_first, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    x2 = tl.load(x_first + half, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    tl.store(out_first, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_first + half, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding: x must be (B, H, S, D) with D even, got {tuple(x.shape)}")
    batch, n_heads, seq_len, head_dim = x.shape
    half = head_dim // 2
    if cos.shape != (seq_len, half) or sin.shape != (seq_len, half):
        raise ValueError(f"rotary_embedding: cos and sin must be (S, D/2) = {(seq_len, half)}, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if cos.stride(-1) != 1:
        cos = cos.contiguous()
    if sin.stride(-1) != 1:
        sin = sin.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    heads = min(TUNABLES["HEADS_PER_PROGRAM"], triton.next_power_of_2(n_heads))
    block_half = triton.next_power_of_2(half)
    block_s = min(max(1, TUNABLES["TILE_ELEMS"] // (heads * block_half)), triton.next_power_of_2(seq_len))
    grid = (triton.cdiv(seq_len, block_s), triton.cdiv(n_heads, heads), batch)
    _rotate_half[grid](
        x, cos, sin, out, n_heads, seq_len, half,
        x.stride(0), x.stride(1), x.stride(2), out.stride(0), out.stride(1), out.stride(2),
        cos.stride(0), sin.stride(0),
        HEADS=heads, BLOCK_S=block_s, BLOCK_HALF=block_half,
        num_warps=_num_warps(2 * heads * block_s * block_half))
    return out
