"""A @ B, M=N=256, K=524288 (split-K territory), float32 (KernelBench level 1 style)."""
import torch
from torch import nn

M, N, K = 256, 256, 524288


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
