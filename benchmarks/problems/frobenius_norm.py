"""A tensor divided by its Frobenius norm: a whole-tensor reduction, then a division (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, FEATURES, DIM = 16, 64, 65536


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p="fro")


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM)]


def get_init_inputs():
    return []
