"""Each row divided by the sum of its absolute values (KernelBench level 1 style)."""
import torch
from torch import nn

ROWS, COLS = 4096, 16384


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
