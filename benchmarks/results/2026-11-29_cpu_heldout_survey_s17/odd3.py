"""Batch 3 of held-out code shapes: weight-normed vocoder, channels_last conv net, float64 inside, varargs forward,
autocast inside forward, grouped transposed conv."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


class Vocoder(nn.Module):   # HiFi-GAN-ish: weight-normed ConvTranspose1d upsampling + dilated residual Conv1d
    def __init__(self):
        super().__init__()
        self.pre = weight_norm(nn.Conv1d(8, 16, 7, padding=3))
        self.up = weight_norm(nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1))
        self.res = nn.ModuleList(weight_norm(nn.Conv1d(8, 8, 3, padding=d, dilation=d)) for d in (1, 3))
        self.post = weight_norm(nn.Conv1d(8, 1, 7, padding=3))
    def forward(self, mel):
        x = self.up(F.leaky_relu(self.pre(mel), 0.1))
        for conv in self.res:
            x = x + conv(F.leaky_relu(x, 0.1))
        return torch.tanh(self.post(x))


class ChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1); self.bn = nn.BatchNorm2d(16); self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.to(memory_format=torch.channels_last)
    def forward(self, x):
        x = x.contiguous(memory_format=torch.channels_last)
        y = F.relu(self.bn(self.c1(x)))
        return F.adaptive_avg_pool2d(y + self.c2(y), 1).flatten(1)


class Float64Inside(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 16)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 16, dtype=torch.float64))
    def forward(self, x):
        y = self.fc(x).double() * self.scale
        return torch.logsumexp(y, -1).float()


class Varargs(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 16)
    def forward(self, *xs):
        return sum(F.gelu(self.fc(x)) for x in xs)


class AutocastInside(nn.Module):
    def __init__(self):
        super().__init__(); self.fc1 = nn.Linear(16, 32); self.fc2 = nn.Linear(32, 16)
    def forward(self, x):
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            h = F.relu(self.fc1(x))
        return self.fc2(h.float())


class GroupedTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1, groups=4)
        self.n = nn.GroupNorm(2, 8)
    def forward(self, x):
        return F.silu(self.n(self.t(x)))


BUILDERS = dict(vocoder=Vocoder, channels_last=ChannelsLast, float64=Float64Inside, varargs=Varargs,
                autocast=AutocastInside, grouped_transpose=GroupedTranspose)


def get_model(arch="vocoder"):
    torch.manual_seed(0)
    return BUILDERS[arch]().eval()


def get_inputs(arch="vocoder"):
    torch.manual_seed(0)
    if arch == "vocoder":
        return [torch.randn(1, 8, 16)]
    if arch == "channels_last":
        return [torch.randn(2, 3, 16, 16)]
    if arch == "varargs":
        return [torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16)]
    if arch == "grouped_transpose":
        return [torch.randn(1, 8, 8, 8)]
    return [torch.randn(4, 16)]
