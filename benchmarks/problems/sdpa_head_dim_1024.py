"""F.scaled_dot_product_attention with head_dim 1024: above what the attention kernels take."""
import torch
import torch.nn.functional as F
from torch import nn

BATCH, HEADS, SEQ, HEAD_DIM = 2, 8, 512, 1024


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, dtype=torch.float16) for _ in range(3)]


def get_init_inputs():
    return []
