"""GEMM -> ReLU -> max over each row (amax): a GEMM whose epilogue reduces (KernelBench level 2 style)."""
import torch
from torch import nn

BATCH, IN_FEATURES, HIDDEN = 4096, 1024, 4096


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(torch.relu(self.linear(x)), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
