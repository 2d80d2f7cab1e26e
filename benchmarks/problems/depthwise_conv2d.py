"""A depthwise 2-D convolution: one 3x3 filter per channel, no bias (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, CHANNELS, SIZE = 16, 64, 128


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS]
