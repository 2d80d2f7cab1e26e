"""nn.MultiheadAttention, batch first, self-attention without the weights (KernelBench level 3 style)."""
import torch
from torch import nn

BATCH, SEQ, EMBED, HEADS = 16, 512, 512, 8


class Model(nn.Module):
    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBED)]


def get_init_inputs():
    return [EMBED, HEADS]
