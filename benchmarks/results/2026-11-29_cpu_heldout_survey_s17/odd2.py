"""More held-out shapes of model code: randomness, FFT state-space conv, nn.TransformerEncoder's fast path, input
mutation, dict outputs, packed sequences, data-dependent control flow."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(32, 16); self.mu = nn.Linear(16, 8); self.lv = nn.Linear(16, 8); self.dec = nn.Linear(8, 32)
    def forward(self, x):
        h = F.relu(self.enc(x)); mu, logvar = self.mu(h), self.lv(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.dec(z)), mu, logvar


class FFTConvSSM(nn.Module):   # S4D / Hyena-style long convolution via FFT
    def __init__(self, d=16, n=4, L=32):
        super().__init__()
        self.log_dt = nn.Parameter(torch.full((d,), -3.0))
        self.a_re = nn.Parameter(-0.5 * torch.ones(d, n)); self.a_im = nn.Parameter(torch.arange(n).float().repeat(d, 1))
        self.c = nn.Parameter(torch.randn(d, n, 2) * 0.5); self.D = nn.Parameter(torch.randn(d))
        self.out = nn.Linear(d, d); self.L = L
    def kernel(self):
        dt = torch.exp(self.log_dt)
        a = torch.complex(self.a_re, self.a_im)
        c = torch.view_as_complex(self.c)
        dta = a * dt[:, None]
        k = c * (torch.exp(dta) - 1) / a
        return 2 * torch.einsum("dn,dnl->dl", k, torch.exp(dta[..., None] * torch.arange(self.L))).real
    def forward(self, u):                 # (b, L, d)
        u = u.transpose(1, 2)
        k = self.kernel()
        y = torch.fft.irfft(torch.fft.rfft(u, n=2 * self.L) * torch.fft.rfft(k, n=2 * self.L), n=2 * self.L)[..., :self.L]
        y = y + u * self.D[:, None]
        return self.out(F.gelu(y).transpose(1, 2))


class TorchTransformer(nn.Module):
    def __init__(self, mask=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.1)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.mask = mask
    def forward(self, x):
        if self.mask:
            pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device); pad[:, -2:] = True
            return self.enc(x, src_key_padding_mask=pad)
        return self.enc(x)


class Mutates(nn.Module):    # modifies its input in place
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 16)
    def forward(self, x):
        x.mul_(2)
        return self.fc(x).relu_()


class DictOut(nn.Module):
    def __init__(self):
        super().__init__(); self.fc = nn.Linear(16, 16); self.fc2 = nn.Linear(16, 4)
    def forward(self, x):
        h = F.silu(self.fc(x))
        return {"logits": self.fc2(h), "hidden": [h, None], "n": 3}


class Packed(nn.Module):
    def __init__(self):
        super().__init__(); self.rnn = nn.LSTM(8, 16, batch_first=True); self.fc = nn.Linear(16, 3)
    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        return self.fc(out.sum(1) + h[-1])


class Branchy(nn.Module):   # data-dependent control flow and .item()
    def __init__(self):
        super().__init__(); self.a = nn.Linear(16, 16); self.b = nn.Linear(16, 16)
    def forward(self, x):
        h = self.a(x)
        if h.mean() > 0:
            h = torch.relu(h)
        else:
            h = torch.tanh(h)
        steps = int(h.abs().sum().item()) % 3 + 1
        for _ in range(steps):
            h = self.b(h)
        return h


BUILDERS = dict(vae=VAE, fftssm=FFTConvSSM, torchtransformer=TorchTransformer,
                torchtransformer_mask=lambda: TorchTransformer(True), mutates=Mutates, dictout=DictOut,
                packed=Packed, branchy=Branchy)


def get_model(arch="vae"):
    torch.manual_seed(0)
    return BUILDERS[arch]().eval()


def get_inputs(arch="vae"):
    torch.manual_seed(0)
    if arch == "vae":
        return [torch.randn(4, 32)]
    if arch == "fftssm":
        return [torch.randn(2, 32, 16)]
    if arch.startswith("torchtransformer"):
        return [torch.randn(2, 8, 32)]
    if arch == "packed":
        return [torch.randn(3, 6, 8), torch.tensor([6, 4, 2])]
    return [torch.randn(4, 16)]


class EncoderWithHeads(nn.Module):     # linears outside and inside a padded nn.TransformerEncoder
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2, mask_check=False)
        self.head = nn.Linear(32, 8)
    def forward(self, x):
        pad = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device); pad[1:, -3:] = True
        return self.head(self.enc(F.gelu(self.proj(x)), src_key_padding_mask=pad))


BUILDERS["encheads"] = EncoderWithHeads
_inputs = get_inputs


def get_inputs(arch="vae"):
    if arch == "encheads":
        torch.manual_seed(0)
        return [torch.randn(2, 8, 24)]
    return _inputs(arch)
