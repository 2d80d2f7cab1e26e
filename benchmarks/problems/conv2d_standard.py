"""A 2-D convolution, square kernel, with its bias (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE = 16, 32, 64, 256


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, 3]
