"""LayerNorm over the last 3 dims of a 4-D tensor (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, FEATURES, DIM1, DIM2 = 16, 64, 256, 256


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple = (FEATURES, DIM1, DIM2)):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
