"""Small models of each kind a region covers, for the region tests (CPU, float32, a few hundred elements)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class GemmSigmoidRowSum(nn.Module):
    """GEMM -> sigmoid -> row sum: one region whose output is [M, 1]."""

    def __init__(self, k: int = 32, n: int = 48):
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x):
        return torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)


class Gelu(nn.Module):
    def forward(self, x):
        return F.gelu(x)


class TanhGelu(nn.Module):
    """GELU's tanh approximation written out in ops."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class LogSoftmax(nn.Module):
    def forward(self, x):
        return torch.log_softmax(x, dim=1)


class L2Norm(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


class L1Norm(nn.Module):
    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


class Hinge(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


class MatVec(nn.Module):
    """A matrix-vector product followed by a scale: the GEMM with its epilogue."""

    def forward(self, a, b):
        return torch.matmul(a, b) * 0.5


class LogOfSum(nn.Module):
    def forward(self, x):
        return torch.log(x).sum(dim=-1) + torch.sqrt(x).mean(dim=-1)


class Embedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(20, 16)

    def forward(self, ids):
        return self.table(ids) * 2.0


class Repeated(nn.Module):
    """The same block twice: one region with two instances."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x)) * 0.5
        return x


class CumSum(nn.Module):
    """A scan: Inductor passes a combine function of its own (a @triton.jit helper) to tl.associative_scan."""
    def forward(self, x):
        return torch.cumsum(x, dim=1)


class LoneSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def rows(m: int = 8, n: int = 32) -> torch.Tensor:
    return torch.randn(m, n, generator=torch.Generator().manual_seed(0))


class MultiheadAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class VitBlock(nn.Module):
    """A small vision-transformer block: pre-norm attention and MLP, each with its residual."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def tokens() -> torch.Tensor:
    return torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))


class DeepNarrowMLP(nn.Module):
    """KernelBench's DeepNarrowMLP, small: Linear + ReLU in a row, so one region's output is the next one's input."""

    def __init__(self, width: int = 16, depth: int = 4):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.network = nn.Sequential(*layers, nn.Linear(width, 4))

    def forward(self, x):
        return self.network(x)


class CausalMaskAttention(nn.Module):
    """A mask made from arange alone feeds attention (a barrier): ops that read no tensor, as HF LLaMA's mask on a GPU."""

    def forward(self, q, k, v):
        position = torch.arange(q.shape[-2], device=q.device)
        mask = (position[:, None] >= position[None, :]).float()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask * 0.5)


class ConvBnRelu(nn.Module):
    """A convolution with its bias, an inference batch norm and a ReLU: one region headed by the convolution."""

    def __init__(self, channels: int = 3, out: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(channels, out, 3, padding=1)
        self.bn = nn.BatchNorm2d(out)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class ResidualBlock(nn.Module):
    """A ResNet block's tail: convolution, batch norm, the residual add and ReLU; blocks in a row chain their regions."""

    def __init__(self, channels: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


class MaxPool(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class DepthwiseConv(nn.Module):
    """A depthwise convolution alone: no epilogue, a region of its own."""

    def __init__(self, channels: int = 4):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)

    def forward(self, x):
        return self.conv(x)


def images(channels: int = 3, size: int = 6) -> torch.Tensor:
    return torch.randn(1, channels, size, size, generator=torch.Generator().manual_seed(2))


class GatheredTokenTypes(nn.Module):
    """BERT's token types: buffer ids gathered at the positions, then embedded; the ids reach the embedding only
    through the gather, and an H200 run drew them past the embedding's 2 rows (a device-side assert)."""

    def __init__(self, seq: int = 64, dim: int = 32):
        super().__init__()
        self.types = nn.Embedding(2, dim)
        self.register_buffer("token_type_ids", torch.zeros(1, seq, dtype=torch.long))
        self.register_buffer("position_ids", torch.arange(seq).unsqueeze(0))

    def forward(self, x):
        seq = x.shape[1]
        ids = torch.gather(self.token_type_ids[:, :seq], 1, self.position_ids[:, :seq])
        return x + self.types(ids)
