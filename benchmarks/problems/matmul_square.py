"""A @ B, 4096 x 4096 x 4096, float32 (KernelBench level 1 style)."""
import torch
from torch import nn

M, N, K = 4096, 4096, 4096


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
