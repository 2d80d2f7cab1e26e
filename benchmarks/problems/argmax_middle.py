"""Argmax over the middle dimension of a 3-D tensor (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, DIM1, DIM2 = 128, 1024, 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return []
