"""A matrix-vector product (KernelBench level 1 style): M=2048, K=131072, N=1."""
import torch
from torch import nn

M, K = 2048, 131072


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
