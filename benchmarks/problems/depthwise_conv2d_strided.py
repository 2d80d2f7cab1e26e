"""A depthwise 2-D convolution, 5x5, stride 2, with a bias, on an input that is not square (KernelBench level 1 style)."""
import torch
from torch import nn

BATCH, CHANNELS, HEIGHT, WIDTH = 16, 96, 160, 192


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 5, stride=2, padding=2, groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
