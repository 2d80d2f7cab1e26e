"""A @ B, 8205 x 2949 x 5921 (no power of two), float32 (KernelBench level 1 style)."""
import torch
from torch import nn

M, N, K = 8205, 2949, 5921


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
