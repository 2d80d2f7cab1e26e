"""BERT-base encoder in plain PyTorch (post-norm LayerNorm, GELU MLP, bidirectional attention), random weights.

Configs: "default" (BERT-base: 12 layers, 768 hidden, 12 heads, 109M parameters without the
pooler) and "tiny" (for CPU tests); pick one with get_model(config="tiny") and override any
field by keyword. The output is the last layer's hidden states, one vector per token.
Also a KernelBench problem: Model(*get_init_inputs())(*get_inputs()).
"""

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    intermediate_size: int = 3072
    layer_norm_eps: float = 1e-12


CONFIGS = {
    "default": Config(),
    "tiny": Config(vocab_size=1000, dim=64, n_layers=2, n_heads=4, intermediate_size=256),
}
BATCH_SIZE, SEQ_LEN = 1, 512


def make_config(config: "str | Config" = "default", **overrides) -> Config:
    """A named config (or a Config) with some fields overridden."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"unknown config {config!r}; choose one of {', '.join(CONFIGS)}")
        config = CONFIGS[config]
    return dataclasses.replace(config, **overrides)


class Embeddings(nn.Module):
    """Token + position + segment embeddings, then LayerNorm; every token is in segment 0."""

    def __init__(self, config: Config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.dim)
        self.norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(token_ids.shape[-1], device=token_ids.device)
        x = self.word_embeddings(token_ids) + self.position_embeddings(positions) + self.token_type_embeddings.weight[0]
        return self.norm(x)


class SelfAttention(nn.Module):
    """Bidirectional multi-head self-attention with separate query, key and value projections."""

    def __init__(self, config: Config):
        super().__init__()
        self.n_heads = config.n_heads
        self.query = nn.Linear(config.dim, config.dim)
        self.key = nn.Linear(config.dim, config.dim)
        self.value = nn.Linear(config.dim, config.dim)
        self.output = nn.Linear(config.dim, config.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, dim = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq_len, self.n_heads, dim // self.n_heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)))
        return self.output(out.transpose(1, 2).reshape(batch, seq_len, dim))


class FeedForward(nn.Module):
    """dim -> intermediate -> dim with the exact (erf) GELU."""

    def __init__(self, dim: int, intermediate_size: int):
        super().__init__()
        self.intermediate = nn.Linear(dim, intermediate_size)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate_size, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.act(self.intermediate(x)))


class EncoderLayer(nn.Module):
    """Post-norm residual block: LayerNorm(x + attention(x)), then LayerNorm(x + feed_forward(x))."""

    def __init__(self, config: Config):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.feed_forward = FeedForward(config.dim, config.intermediate_size)
        self.output_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.feed_forward(x))


class Model(nn.Module):
    """Token ids (B, S) -> hidden states (B, S, dim)."""

    def __init__(self, config: "str | Config" = "default", **overrides):
        super().__init__()
        self.config = make_config(config, **overrides)
        self.embeddings = Embeddings(self.config)
        self.layers = nn.ModuleList(EncoderLayer(self.config) for _ in range(self.config.n_layers))

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        if token_ids.shape[-1] > self.config.max_position_embeddings:
            raise ValueError(f"sequence length {token_ids.shape[-1]} is longer than max_position_embeddings "
                             f"{self.config.max_position_embeddings}")
        x = self.embeddings(token_ids)
        for layer in self.layers:
            x = layer(x)
        return x


def get_model(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> Model:
    """The model; batch and seq are the inputs' (get_inputs), accepted here so one set of --model-arg serves both."""
    return Model(config, **overrides)


def get_inputs(config: "str | Config" = "default", batch: int = BATCH_SIZE, seq: int = SEQ_LEN, **overrides) -> list:
    """Random token ids of shape (batch, seq) below the config's vocabulary size (--model-arg batch=4 seq=1024)."""
    return [torch.randint(0, make_config(config, **overrides).vocab_size, (batch, seq))]


def get_init_inputs() -> list:
    return []
