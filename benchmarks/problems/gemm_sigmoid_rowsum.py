"""GEMM -> sigmoid -> row sum: one region whose output is [batch, 1], never the [batch, hidden] product (KernelBench level 2 style)."""
import torch
from torch import nn

BATCH, IN_FEATURES, HIDDEN = 4096, 1024, 4096


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
