"""Batch 4: a TorchScript submodule, a custom autograd Function, a numpy round trip inside forward."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s + x * s * (1 - s))


class Block(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 16)
    def forward(self, x):
        return F.relu(self.fc(x))


class Scripted(nn.Module):
    def __init__(self):
        super().__init__(); self.block = torch.jit.script(Block()); self.out = nn.Linear(16, 4)
    def forward(self, x):
        return self.out(self.block(x))


class CustomFn(nn.Module):
    def __init__(self):
        super().__init__(); self.a = nn.Linear(16, 32); self.b = nn.Linear(32, 16)
    def forward(self, x):
        return self.b(Swish.apply(self.a(x)))


class Numpy(nn.Module):
    def __init__(self):
        super().__init__(); self.a = nn.Linear(16, 16)
    def forward(self, x):
        w = torch.from_numpy(np.hanning(16).astype(np.float32)).to(x.device, x.dtype)
        return self.a(x) * w


BUILDERS = dict(scripted=Scripted, customfn=CustomFn, numpy=Numpy)


def get_model(arch="scripted"):
    torch.manual_seed(0)
    return BUILDERS[arch]().eval()


def get_inputs(arch="scripted"):
    torch.manual_seed(0)
    return [torch.randn(4, 16)]


class MLP(nn.Module):
    def __init__(self):
        super().__init__(); self.a = nn.Linear(16, 32); self.b = nn.Linear(32, 16)
    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


BUILDERS["allscripted"] = lambda: torch.jit.script(MLP())
BUILDERS["traced"] = lambda: torch.jit.trace(MLP(), torch.randn(4, 16))
