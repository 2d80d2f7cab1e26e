"""GELU (exact, erf) of a float32 tensor (KernelBench level 1 style)."""
import torch
import torch.nn.functional as F
from torch import nn

ROWS, COLS = 4096, 8192


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
