"""GEMM -> sigmoid -> row sum -> LogSumExp over the batch (KernelBench level 2 #45 style)."""
import torch
from torch import nn

BATCH, IN_FEATURES, HIDDEN = 4096, 1024, 4096


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.linear = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(self.linear(x))
        return torch.logsumexp(torch.sum(x, dim=1), dim=0)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN]
