"""Mean cross-entropy of float32 logits against class indices (KernelBench level 1 style)."""
import torch
import torch.nn.functional as F
from torch import nn

BATCH, CLASSES = 32768, 4096


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(BATCH, CLASSES), torch.randint(0, CLASSES, (BATCH,))]


def get_init_inputs():
    return []
