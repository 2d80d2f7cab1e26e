"""Conv2d -> BatchNorm2d (inference) -> ReLU: a convolution with its epilogue (KernelBench level 2 style)."""
import torch
from torch import nn

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE = 16, 32, 64, 64


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
