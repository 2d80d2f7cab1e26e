"""Mean of 1 - cosine similarity of rows (KernelBench level 1 style)."""
import torch
import torch.nn.functional as F
from torch import nn

BATCH, DIM = 16384, 4096


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(1 - F.cosine_similarity(predictions, targets, dim=1))


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
