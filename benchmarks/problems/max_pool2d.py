"""2-D max pooling, kernel 2, stride 2, padding 1, dilation 3 (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, CHANNELS, SIZE = 16, 32, 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2, padding=1, dilation=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
