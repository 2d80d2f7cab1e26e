"""Mean squared error written out in ops (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, COLS = 32768, 1024


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(BATCH, COLS), torch.randn(BATCH, COLS)]


def get_init_inputs():
    return []
