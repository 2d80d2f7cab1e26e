"""Max over dim 1 of a 3-D tensor, values and their indices (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, DIM1, DIM2 = 16, 256, 256


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        best = torch.max(x, dim=self.dim)
        return best.values, best.indices


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return [1]
