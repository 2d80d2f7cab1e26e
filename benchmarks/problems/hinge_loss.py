"""Mean hinge loss of predictions against +-1 targets (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, COLS = 32768, 1024


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


def get_inputs():
    return [torch.randn(BATCH, COLS), torch.randint(0, 2, (BATCH, COLS)).float() * 2 - 1]


def get_init_inputs():
    return []
