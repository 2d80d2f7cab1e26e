"""Each row divided by its L2 norm (KernelBench level 1 style)."""
import torch
from torch import nn

ROWS, COLS = 4096, 16384


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
