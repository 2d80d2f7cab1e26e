"""The PyTorch references: the oracle every kernel type is judged against (reference.py shows them).

Each function here defines what its kernel type computes, and its signature is the one every
`kernel_fn` of that type must accept. bench.py calls these on upcast copies of the inputs
(float32, or float64 for float32 kernels) to get the expected output, and on the original inputs
to time PyTorch eager. Keep them plain PyTorch: they are the definition, not an implementation.
"""

import math

import torch
import torch.nn.functional as F


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ b (K, N) -> (M, N)."""
    return a @ b


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension."""
    return torch.softmax(x, dim=-1)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
              dim: int = -1) -> torch.Tensor:
    """LayerNorm over one dimension, with an affine weight and bias of that size: the last (the usual
    form), or dim 1 of a tensor whose later dimensions are positions (x (B, C, H, W) over C)."""
    moved = x.movedim(dim, -1)
    return F.layer_norm(moved, (moved.shape[-1],), weight, bias, eps).movedim(-1, dim)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, dim: int = -1) -> torch.Tensor:
    """RMSNorm over one dimension (LLaMA style: normalize in float32, scale by weight).

    dim is the last dimension (the usual form), or dim 1 of a tensor whose later dimensions are
    positions (x (B, C, H, W) normalized over C); weight has that dimension's size.
    """
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=dim, keepdim=True) + eps)
    along_dim = [1] * x.dim()
    along_dim[dim] = -1
    return (normed * weight.float().reshape(along_dim)).to(x.dtype)


def rmsnorm_linear(x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor,
                   eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm folded into the following linear layer: rmsnorm(x, norm_weight, eps) @ weight.T.

    x is (M, K), norm_weight (K,), weight (N, K) as nn.Linear stores it; the normalized activation
    is rounded to x's dtype before the product, as the unfused model stores it.
    """
    return rmsnorm(x, norm_weight, eps) @ weight.T


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: float | None = None) -> torch.Tensor:
    """Scaled dot-product attention: q (B, H, S, D), k and v (B, KV, S_k, D); sm_scale defaults to 1/sqrt(D).

    With KV < H (grouped-query, or multi-query when KV = 1), KV divides H and query head h attends
    with key/value head h // (H / KV), as scaled_dot_product_attention(..., enable_gqa=True) does.
    """
    if k.shape[-3] != q.shape[-3]:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        seq_q, seq_k = q.shape[-2], k.shape[-2]
        future = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).triu(1 + seq_k - seq_q)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


_ACTIVATIONS = {
    "silu": F.silu,
    "gelu": lambda t: F.gelu(t, approximate="tanh"),
    "relu2": lambda t: torch.relu(t).square(),
}


def fused_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
              activation: str = "silu") -> torch.Tensor:
    """Gated MLP (SwiGLU family): (act(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T.

    Weights use nn.Linear's layout: w_gate and w_up are (F, D), w_down is (D, F).
    activation is one of "silu", "gelu" (tanh approximation) or "relu2" (squared ReLU).
    """
    return (_ACTIVATIONS[activation](x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def rmsnorm_mlp(x: torch.Tensor, norm_weight: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                w_down: torch.Tensor, eps: float = 1e-6, activation: str = "silu") -> torch.Tensor:
    """RMSNorm followed by the gated MLP that is its only consumer: fused_mlp(rmsnorm(x, norm_weight, eps), ...).

    x is (M, D), norm_weight (D,); the weights and activation are fused_mlp's. The normalized
    activation is rounded to x's dtype in between, as the unfused pair of modules stores it.
    """
    return fused_mlp(rmsnorm(x, norm_weight, eps), w_gate, w_up, w_down, activation)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of (M, V) logits against (M,) int64 class targets; returns a float32 scalar."""
    return F.cross_entropy(logits.float(), targets)


def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half convention (LLaMA, GPT-NeoX).

    x is (B, H, S, D); cos and sin are (S, D/2). The first half of the head dimension pairs with
    the second: out = [x1*cos - x2*sin, x2*cos + x1*sin].
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def reduce(x: torch.Tensor, dim: int = -1, op: str = "sum") -> torch.Tensor:
    """Sum, mean, max or min of x over one dimension (op "sum", "mean", "max", "min", "max_dim" or "min_dim");
    the dimension is removed.

    max and min are torch.amax / torch.amin: values only, nan propagates. max_dim and min_dim are
    torch.max / torch.min(x, dim): a pair (values, int64 indices), the index of the first extreme
    value along dim, or of the first nan where there is one. mean over a float16 or bfloat16
    tensor accumulates in float32, as torch.mean does. (The annotation is the one-tensor form, the
    schema torch.compile traces a kernel by; the pair is routed eagerly only.)
    """
    if op == "sum":
        return x.sum(dim=dim)
    if op == "mean":
        return x.mean(dim=dim)
    if op == "max":
        return x.amax(dim=dim)
    if op == "min":
        return x.amin(dim=dim)
    if op == "max_dim":
        return x.max(dim=dim)
    if op == "min_dim":
        return x.min(dim=dim)
    raise ValueError(f"reduce: unknown op {op!r} (expected 'sum', 'mean', 'max', 'min', 'max_dim' or 'min_dim')")
