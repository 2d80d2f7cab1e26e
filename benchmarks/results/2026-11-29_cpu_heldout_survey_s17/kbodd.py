"""KernelBench-style odd models: scalar loss outputs, integer outputs, 3D convs, tuples."""
import torch
import torch.nn.functional as F
from torch import nn


class Loss(nn.Module):          # scalar output, int64 target input
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 10)
    def forward(self, x, target):
        return F.cross_entropy(self.fc(x), target)


class Argmax(nn.Module):        # int64 output
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 10)
    def forward(self, x):
        return torch.argmax(torch.relu(self.fc(x)), dim=1)


class Conv3dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(3, 8, 3, padding=1); self.n = nn.InstanceNorm3d(8)
        self.t = nn.ConvTranspose3d(8, 4, 2, stride=2)
    def forward(self, x):
        return self.t(F.leaky_relu(self.n(self.c(x)), 0.1)).sum(dim=(2, 3, 4))


class TupleOut(nn.Module):      # tuple out: values and indices of topk, cumsum, softmax
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 32)
    def forward(self, x):
        y = torch.cumsum(F.softmax(self.fc(x), -1), dim=-1)
        v, i = torch.topk(y, 4, dim=-1)
        return v, i


class PixelShuffleNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 12, 3, padding=1); self.ps = nn.PixelShuffle(2)
        self.up = nn.Upsample(scale_factor=2, mode="nearest"); self.c2 = nn.Conv2d(3, 3, 3, padding=1)
    def forward(self, x):
        return torch.tanh(self.c2(self.up(self.ps(self.c(x)))))


class Attention(nn.Module):     # SDPA with a boolean padding mask input and einsum
    def __init__(self):
        super().__init__(); self.qkv = nn.Linear(32, 96); self.o = nn.Linear(32, 32)
    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        scores = torch.einsum("bhsd,bhtd->bhst", q, k)
        return self.o(y.transpose(1, 2).reshape(b, s, 32)) + scores.mean()


class Conv1dPool(nn.Module):    # AvgPool1d, AdaptiveMaxPool1d, BatchNorm1d, log_softmax
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 8, 5, padding=2); self.bn = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 5)
    def forward(self, x):
        y = F.avg_pool1d(F.elu(self.bn(self.c(x))), 2)
        return F.log_softmax(self.fc(F.adaptive_max_pool1d(y, 1).squeeze(-1)), dim=-1)


BUILDERS = dict(loss=Loss, argmax=Argmax, conv3d=Conv3dNet, tuple=TupleOut, pixelshuffle=PixelShuffleNet,
                attention=Attention, conv1dpool=Conv1dPool)


def get_model(arch="loss"):
    torch.manual_seed(0)
    return BUILDERS[arch]().eval()


def get_inputs(arch="loss"):
    torch.manual_seed(0)
    if arch == "loss":
        return [torch.randn(8, 16), torch.randint(0, 10, (8,))]
    if arch in ("argmax", "tuple"):
        return [torch.randn(8, 16)]
    if arch == "conv3d":
        return [torch.randn(2, 3, 4, 8, 8)]
    if arch == "attention":
        mask = torch.ones(2, 8, dtype=torch.bool); mask[1, 5:] = False
        return [torch.randn(2, 8, 32), mask]
    if arch == "conv1dpool":
        return [torch.randn(4, 4, 32)]
    return [torch.randn(2, 3, 16, 16)]
