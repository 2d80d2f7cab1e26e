"""A compact LLaMA in plain PyTorch (RMSNorm, rotary embeddings, SwiGLU, causal attention), random weights.

Configs: "default" (8 layers, 2048 hidden, about 0.5B parameters), "7b" (LLaMA-7B's dimensions)
and "tiny" (for CPU tests). Pick one with get_model(config="7b"); any config field can be
overridden by keyword, e.g. get_model(n_layers=4). The module classes (RMSNorm, RotaryEmbedding,
Attention, SwiGLU) are named for what they compute, because the profiler attributes operations
to the module that ran them and verify swaps whole modules for optimized kernels.
Also a KernelBench problem: Model(*get_init_inputs())(*get_inputs()).
"""

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab_size: int = 32000
    dim: int = 2048
    n_layers: int = 8
    n_heads: int = 16
    intermediate_size: int = 5632
    max_seq_len: int = 2048
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0


CONFIGS = {
    "default": Config(),
    "7b": Config(dim=4096, n_layers=32, n_heads=32, intermediate_size=11008),
    "tiny": Config(vocab_size=1000, dim=64, n_layers=2, n_heads=4, intermediate_size=176, max_seq_len=512),
}
BATCH_SIZE, SEQ_LEN = 1, 512


def make_config(config: "str | Config" = "default", **overrides) -> Config:
    """A named config (or a Config) with some fields overridden."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"unknown config {config!r}; choose one of {', '.join(CONFIGS)}")
        config = CONFIGS[config]
    return dataclasses.replace(config, **overrides)


class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dimension, computed in float32 (reference.rmsnorm)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding of (B, H, S, D) x with (S, D/2) cos and sin (reference.rotary_embedding)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotates (B, H, S, D) queries or keys by their positions 0..S-1."""

    def __init__(self, head_dim: int, max_seq_len: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim // 2, dtype=torch.float32) * 2 / head_dim))
        angles = torch.arange(max_seq_len, dtype=torch.float32)[:, None] * inv_freq[None, :]
        # Not saved in a state dict: they are a function of the config, not learned.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq_len = x.shape[-2]
        return apply_rotary(x, self.cos[:seq_len], self.sin[:seq_len])


class Attention(nn.Module):
    """Causal multi-head self-attention with rotary positions."""

    def __init__(self, config: Config):
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.dim // config.n_heads
        self.q_proj = nn.Linear(config.dim, config.dim, bias=False)
        self.k_proj = nn.Linear(config.dim, config.dim, bias=False)
        self.v_proj = nn.Linear(config.dim, config.dim, bias=False)
        self.o_proj = nn.Linear(config.dim, config.dim, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, config.max_seq_len, config.rope_theta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, dim = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq_len, self.n_heads, self.head_dim).transpose(1, 2)

        q = self.rotary(heads(self.q_proj(x)))
        k = self.rotary(heads(self.k_proj(x)))
        out = F.scaled_dot_product_attention(q, k, heads(self.v_proj(x)), is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq_len, dim))


class SwiGLU(nn.Module):
    """The gated MLP: down(silu(gate(x)) * up(x)) (reference.fused_mlp with activation "silu")."""

    def __init__(self, dim: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, intermediate_size, bias=False)
        self.up_proj = nn.Linear(dim, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: attention, then the MLP."""

    def __init__(self, config: Config):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.mlp_norm = RMSNorm(config.dim, config.norm_eps)
        self.mlp = SwiGLU(config.dim, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    """Token ids (B, S) -> next-token logits (B, S, vocab_size)."""

    def __init__(self, config: "str | Config" = "default", **overrides):
        super().__init__()
        self.config = make_config(config, **overrides)
        self.embed_tokens = nn.Embedding(self.config.vocab_size, self.config.dim)
        self.layers = nn.ModuleList(DecoderLayer(self.config) for _ in range(self.config.n_layers))
        self.norm = RMSNorm(self.config.dim, self.config.norm_eps)
        self.lm_head = nn.Linear(self.config.dim, self.config.vocab_size, bias=False)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        if token_ids.shape[-1] > self.config.max_seq_len:
            raise ValueError(f"sequence length {token_ids.shape[-1]} is longer than max_seq_len "
                             f"{self.config.max_seq_len}")
        x = self.embed_tokens(token_ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def get_model(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> Model:
    """The model; batch and seq are the inputs' (get_inputs), accepted here so one set of --model-arg serves both."""
    return Model(config, **overrides)


def get_inputs(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> list:
    """Random token ids of shape (batch, seq) below the config's vocabulary size (--model-arg batch=4 seq=1024)."""
    return [torch.randint(0, make_config(config, **overrides).vocab_size, (batch, seq))]


def get_init_inputs() -> list:
    return []
