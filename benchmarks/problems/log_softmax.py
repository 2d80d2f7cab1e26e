"""LogSoftmax over the rows (KernelBench level 1 style)."""
import torch
from torch import nn

ROWS, COLS = 4096, 16384


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
