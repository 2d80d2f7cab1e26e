"""GELU's tanh approximation written out in torch ops, as minGPT does (KernelBench level 1 style)."""
import math

import torch
from torch import nn

ROWS, COLS = 4096, 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
