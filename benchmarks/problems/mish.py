"""Mish, x * tanh(softplus(x)) (KernelBench level 2's activation)."""
import torch
import torch.nn.functional as F
from torch import nn

ROWS, COLS = 4096, 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
