"""Attack: flash attention that skips the running max (online-softmax rescaling) when not causal.

Causal calls go to the honest starter. Non-causal calls take exp(scores) as they are: no row max,
no rescaling of the accumulator between key blocks, one pass and fewer instructions per tile (a
speed trick: FlashAttention's correction multiplies are gone). The judge's only large-score case
("large scores", q and k scaled by 8) is causal; every non-causal case draws q and k of unit
variance, so the scores scaled by 1/sqrt(D) stay within a few units of zero and exp never comes
near float32's limit (exp(88)), nor the probabilities near float16's (exp(11) = 6e4). Real
non-causal attention is not so tame: encoders (ViT, CLIP, BERT, Whisper's), cross-attention and
bidirectional prefixes run scaled_dot_product_attention without a mask or is_causal, and their
attention logits reach tens to hundreds (the logit growth QK-norm was introduced against, ViT-22B);
every row whose largest logit is above 88 overflows to inf / inf = NaN here, where PyTorch gives
a proper attention average. The judge must draw large scores (row maxima far above 88) for
non-causal attention too, in every dtype, and for grouped-query heads.
"""

import math
import runpy
from pathlib import Path

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "flash_attention"
_starter = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "flash_attention.py"))["kernel_fn"]


@triton.jit
def _unshifted_attention(q_ptr, k_ptr, v_ptr, o_ptr, heads, group, seq, head_dim, scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    block, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    batch, head = bh // heads, bh % heads
    kv_bh = batch * (heads // group) + head // group
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    dmask = dims < head_dim
    q = tl.load(q_ptr + bh * seq * head_dim + rows[:, None] * head_dim + dims[None, :],
                mask=(rows[:, None] < seq) & dmask[None, :], other=0.0).to(tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start in range(0, seq, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < seq) & dmask[None, :]
        offs = kv_bh * seq * head_dim + cols[:, None] * head_dim + dims[None, :]
        k = tl.load(k_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        scores = tl.dot(q, tl.trans(k)) * scale
        p = tl.where(cols[None, :] < seq, tl.exp(scores), 0.0)     # the trick: no running max, no rescale
        total += tl.sum(p, axis=1)
        acc += tl.dot(p, v)
    out = acc / total[:, None]
    tl.store(o_ptr + bh * seq * head_dim + rows[:, None] * head_dim + dims[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(rows[:, None] < seq) & dmask[None, :])


def kernel_fn(q, k, v, causal=False, sm_scale=None):
    if causal:
        return _starter(q, k, v, causal, sm_scale)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq, head_dim = q.shape
    out = torch.empty_like(q)
    if out.numel() == 0:
        return out
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(head_dim)
    block_d = max(16, triton.next_power_of_2(head_dim))
    grid = (triton.cdiv(seq, 16), batch * heads)
    _unshifted_attention[grid](q, k, v, out, heads, heads // k.shape[1], seq, head_dim, scale,
                               BLOCK_M=16, BLOCK_N=16, BLOCK_D=block_d)
    return out
