"""A small vision-transformer block: pre-norm self-attention and a GELU MLP, each with its residual (ViT-S sizes)."""
import torch
from torch import nn

BATCH, TOKENS, DIM, HEADS = 32, 197, 384, 6


class Model(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def get_inputs():
    return [torch.randn(BATCH, TOKENS, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
