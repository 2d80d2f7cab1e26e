"""GEMM -> GELU -> scale: a GEMM with a pointwise epilogue (KernelBench level 2 style)."""
import torch
import torch.nn.functional as F
from torch import nn

BATCH, IN_FEATURES, OUT_FEATURES = 4096, 1024, 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x)) * 0.5


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
