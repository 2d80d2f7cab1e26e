"""GPT-2 small in plain PyTorch (pre-norm LayerNorm, tanh GELU MLP, causal attention), random weights.

Configs: "default" (GPT-2 small: 12 layers, 768 hidden, 12 heads, 124M parameters) and "tiny"
(for CPU tests); pick one with get_model(config="tiny") and override any field by keyword.
The output head shares its weight with the token embedding, as in GPT-2.
Also a KernelBench problem: Model(*get_init_inputs())(*get_inputs()).
"""

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab_size: int = 50257
    n_positions: int = 1024
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    layer_norm_eps: float = 1e-5


CONFIGS = {
    "default": Config(),
    "tiny": Config(vocab_size=1000, n_positions=512, dim=64, n_layers=2, n_heads=4),
}
BATCH_SIZE, SEQ_LEN = 1, 512


def make_config(config: "str | Config" = "default", **overrides) -> Config:
    """A named config (or a Config) with some fields overridden."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"unknown config {config!r}; choose one of {', '.join(CONFIGS)}")
        config = CONFIGS[config]
    return dataclasses.replace(config, **overrides)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused query/key/value projection."""

    def __init__(self, config: Config):
        super().__init__()
        self.n_heads = config.n_heads
        self.c_attn = nn.Linear(config.dim, 3 * config.dim)
        self.c_proj = nn.Linear(config.dim, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, dim = x.shape
        q, k, v = (t.view(batch, seq_len, self.n_heads, dim // self.n_heads).transpose(1, 2)
                   for t in self.c_attn(x).split(dim, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(out.transpose(1, 2).reshape(batch, seq_len, dim))


class MLP(nn.Module):
    """dim -> 4 dim -> dim with GPT-2's tanh-approximated GELU."""

    def __init__(self, dim: int):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    """Pre-norm residual block: attention, then the MLP."""

    def __init__(self, config: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.mlp = MLP(config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Model(nn.Module):
    """Token ids (B, S) -> next-token logits (B, S, vocab_size)."""

    def __init__(self, config: "str | Config" = "default", **overrides):
        super().__init__()
        self.config = make_config(config, **overrides)
        self.wte = nn.Embedding(self.config.vocab_size, self.config.dim)
        self.wpe = nn.Embedding(self.config.n_positions, self.config.dim)
        self.blocks = nn.ModuleList(Block(self.config) for _ in range(self.config.n_layers))
        self.ln_f = nn.LayerNorm(self.config.dim, eps=self.config.layer_norm_eps)
        self.lm_head = nn.Linear(self.config.dim, self.config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        seq_len = token_ids.shape[-1]
        if seq_len > self.config.n_positions:
            raise ValueError(f"sequence length {seq_len} is longer than n_positions {self.config.n_positions}")
        positions = torch.arange(seq_len, device=token_ids.device)
        x = self.wte(token_ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def get_model(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> Model:
    """The model; batch and seq are the inputs' (get_inputs), accepted here so one set of --model-arg serves both."""
    return Model(config, **overrides)


def get_inputs(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> list:
    """Random token ids of shape (batch, seq) below the config's vocabulary size (--model-arg batch=4 seq=1024)."""
    return [torch.randint(0, make_config(config, **overrides).vocab_size, (batch, seq))]


def get_init_inputs() -> list:
    return []
