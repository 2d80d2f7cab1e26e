"""Held-out architectures in plain PyTorch, tiny, for probing verify --starters on CPU."""
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm2d(nn.Module):  # ConvNeXt's channels-last LN
    def __init__(self, c):
        super().__init__(); self.ln = nn.LayerNorm(c)
    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1 = nn.Linear(c, 4 * c); self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 1e-1))
    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def convnext():
    return nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), LayerNorm2d(16), ConvNeXtBlock(16),
                         LayerNorm2d(16), nn.Conv2d(16, 32, 2, stride=2), ConvNeXtBlock(32),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(32), nn.Linear(32, 10))


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin); self.c1 = nn.Conv2d(cin, 4 * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * growth); self.c2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)
    def forward(self, feats):
        x = torch.cat(feats, 1)
        return self.c2(F.relu(self.bn2(self.c1(F.relu(self.bn1(x))))))


class DenseNet(nn.Module):
    def __init__(self, growth=8, layers=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.ModuleList(DenseLayer(16 + i * growth, growth) for i in range(layers))
        c = 16 + layers * growth
        self.trans = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2))
        self.head = nn.Linear(c // 2, 10)
    def forward(self, x):
        feats = [self.stem(x)]
        for layer in self.layers:
            feats.append(layer(feats))
        x = self.trans(torch.cat(feats, 1))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(F.relu(x), 1), 1))


def channel_shuffle(x, groups):
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, c):
        super().__init__()
        b = c // 2
        self.branch = nn.Sequential(nn.Conv2d(b, b, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                                    nn.Conv2d(b, b, 3, padding=1, groups=b, bias=False), nn.BatchNorm2d(b),
                                    nn.Conv2d(b, b, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))
    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((a, self.branch(b)), 1), 2)


def shufflenet():
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), ShuffleUnit(16), ShuffleUnit(16),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class Fire(nn.Module):
    def __init__(self, cin, s, e):
        super().__init__()
        self.s = nn.Conv2d(cin, s, 1); self.e1 = nn.Conv2d(s, e, 1); self.e3 = nn.Conv2d(s, e, 3, padding=1)
    def forward(self, x):
        x = F.relu(self.s(x), inplace=True)
        return torch.cat([F.relu(self.e1(x), inplace=True), F.relu(self.e3(x), inplace=True)], 1)


def squeezenet():
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
                         Fire(16, 4, 8), Fire(16, 4, 8), nn.MaxPool2d(3, 2, ceil_mode=True),
                         nn.Dropout(0.5), nn.Conv2d(16, 10, 1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten())


class SE(nn.Module):
    def __init__(self, c, r):
        super().__init__(); self.a = nn.Conv2d(c, r, 1); self.b = nn.Conv2d(r, c, 1)
    def forward(self, x):
        return x * torch.sigmoid(self.b(F.relu(self.a(F.adaptive_avg_pool2d(x, 1)))))


class RegNetBlock(nn.Module):  # Y-block: 1x1, grouped 3x3 (group width 8), SE, 1x1, residual
    def __init__(self, c):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                               nn.Conv2d(c, c, 3, padding=1, groups=c // 8, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                               SE(c, c // 4), nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))
    def forward(self, x):
        return F.relu(x + self.f(x))


def regnet():
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         RegNetBlock(16), RegNetBlock(16), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(16, 10))


class Audio1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv1d(1, 16, 10, stride=5), nn.GroupNorm(16, 16), nn.GELU(),
                                   nn.Conv1d(16, 16, 3, stride=2), nn.GroupNorm(4, 16), nn.GELU(),
                                   nn.Conv1d(16, 16, 3, stride=2, dilation=2), nn.GELU())
        self.head = nn.Linear(16, 8)
    def forward(self, wav):
        return self.head(self.convs(wav.unsqueeze(1)).transpose(1, 2))


class UNet(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
        self.d1 = block(3, c); self.d2 = block(c, 2 * c); self.mid = block(2 * c, 2 * c)
        self.up = nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)
        self.u2 = block(4 * c, c)
        self.u1 = block(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)
    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        y = self.u2(torch.cat([self.up(m), b], 1))
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return self.out(self.u1(torch.cat([y, a], 1)))


class MixerBlock(nn.Module):
    def __init__(self, tokens, dim):
        super().__init__()
        self.n1 = nn.LayerNorm(dim); self.t1 = nn.Linear(tokens, 2 * tokens); self.t2 = nn.Linear(2 * tokens, tokens)
        self.n2 = nn.LayerNorm(dim); self.c1 = nn.Linear(dim, 2 * dim); self.c2 = nn.Linear(2 * dim, dim)
    def forward(self, x):
        y = self.n1(x).transpose(1, 2)
        x = x + self.t2(F.gelu(self.t1(y))).transpose(1, 2)
        return x + self.c2(F.gelu(self.c1(self.n2(x))))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 8, stride=8)
        self.blocks = nn.Sequential(MixerBlock(16, 32), MixerBlock(16, 32))
        self.norm = nn.LayerNorm(32); self.head = nn.Linear(32, 10)
    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


class Recommender(nn.Module):  # DLRM-ish: embedding bags + dense MLP + dot interaction
    def __init__(self):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(100, 16, mode="sum") for _ in range(3))
        self.bottom = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(16 + 6, 16), nn.ReLU(), nn.Linear(16, 1))
    def forward(self, dense, ids, offsets):
        d = self.bottom(dense)
        feats = torch.stack([d] + [bag(ids[i], offsets) for i, bag in enumerate(self.bags)], 1)
        inter = torch.bmm(feats, feats.transpose(1, 2))
        iu = torch.triu_indices(4, 4, 1)
        return torch.sigmoid(self.top(torch.cat([d, inter[:, iu[0], iu[1]]], 1)))


class BiLSTM(nn.Module):
    def __init__(self, cell="lstm"):
        super().__init__()
        rnn = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn(16, 16, num_layers=2, batch_first=True, bidirectional=cell == "lstm")
        self.head = nn.Linear(32 if cell == "lstm" else 16, 4)
    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


def window_partition(x, w):
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).contiguous()
    return x.view(-1, w * w, c)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, window, shift):
        super().__init__()
        self.n1 = nn.LayerNorm(dim); self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.n2 = nn.LayerNorm(dim); self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.w, self.shift = window, shift
    def forward(self, x):
        b, h, w, c = x.shape
        y = self.n1(x)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        win = window_partition(y, self.w)
        win, _ = self.attn(win, win, win, need_weights=False)
        y = win.view(b, h // self.w, w // self.w, self.w, self.w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y
        return x + self.mlp(self.n2(x))


class Swin(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, 4)
        self.blocks = nn.Sequential(SwinBlock(16, 2, 4, 0), SwinBlock(16, 2, 4, 2))
        self.head = nn.Linear(16, 10)
    def forward(self, x):
        x = self.patch(x).permute(0, 2, 3, 1)
        return self.head(self.blocks(x).mean((1, 2)))


class MNASBlock(nn.Module):  # inverted residual with 5x5 depthwise and ReLU6
    def __init__(self, c):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(c, 3 * c, 1, bias=False), nn.BatchNorm2d(3 * c), nn.ReLU6(inplace=True),
                               nn.Conv2d(3 * c, 3 * c, 5, padding=2, groups=3 * c, bias=False), nn.BatchNorm2d(3 * c),
                               nn.ReLU6(inplace=True), nn.Conv2d(3 * c, c, 1, bias=False), nn.BatchNorm2d(c))
    def forward(self, x):
        return x + self.f(x)


def mnasnet():
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         MNASBlock(16), MNASBlock(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                         nn.Linear(16, 10))


BUILDERS = dict(convnext=convnext, densenet=DenseNet, shufflenet=shufflenet, squeezenet=squeezenet, regnet=regnet,
                audio1d=Audio1d, unet=UNet, mixer=Mixer, recommender=Recommender, bilstm=BiLSTM,
                gru=lambda: BiLSTM("gru"), swin=Swin, mnasnet=mnasnet)


def get_model(arch="convnext"):
    torch.manual_seed(0)
    return BUILDERS[arch]().eval()


def get_inputs(arch="convnext"):
    torch.manual_seed(0)
    if arch == "audio1d":
        return [torch.randn(1, 400)]
    if arch == "recommender":
        return [torch.randn(2, 8), torch.randint(0, 100, (3, 6)), torch.tensor([0, 3])]
    if arch in ("bilstm", "gru"):
        return [torch.randn(1, 8, 16)]
    return [torch.randn(1, 3, 32, 32)]
