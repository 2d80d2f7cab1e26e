"""Sequence models of the zoo in plain PyTorch: an LSTM, a GRU, a Mamba-style selective scan, and torch.nn's
Transformer encoder over a padded batch.

    autokernel verify benchmarks/zoo/sequence.py --model-arg arch=mamba [--model-arg size=tiny] --starters

The LSTM and GRU are torch.nn's (cuDNN on a GPU) between a linear embedding and a linear head. The Mamba-style
block is a selective state-space scan as Mamba computes it (input-dependent step size, B and C; a diagonal A),
written as a chunked parallel scan: within a chunk, h_t = a_t * h_{t-1} + b_t is h = P * (h_0 + cumsum(b / P)) with
P the running product of a, taken in log space and in float32 (the scan runs in float32 whatever the model's dtype);
chunks of CHUNK steps keep 1 / P finite, and the state is carried from chunk to chunk.

The encoder is nn.TransformerEncoder given a padding mask (the last quarter of each sequence but the first is
padding): in eval mode torch runs its fused fast path on a nested tensor, which no other zoo model does (profiling
it failed before: a nested tensor has no shape).
"""

import torch
import torch.nn.functional as F
from torch import nn

ARCHS = ("lstm", "gru", "mamba", "encoder")
CHUNK = 16
SIZES = {"full": dict(dim=512, hidden=512, layers=2, seq=128, state=16, heads=8, batch=8),
         "tiny": dict(dim=16, hidden=16, layers=1, seq=8, state=4, heads=2, batch=2)}


class Recurrent(nn.Module):
    def __init__(self, cell: str, dim: int, hidden: int, layers: int):
        super().__init__()
        self.embed = nn.Linear(dim, hidden)
        self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(hidden, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, dim)

    def forward(self, x):
        out, _ = self.rnn(torch.tanh(self.embed(x)))
        return self.head(out)


class SelectiveScan(nn.Module):
    """One Mamba-style block: in-projection, causal depthwise conv, selective scan, gated out-projection."""

    def __init__(self, dim: int, state: int):
        super().__init__()
        inner = 2 * dim
        self.norm = nn.LayerNorm(dim)
        self.in_proj = nn.Linear(dim, 2 * inner)
        self.conv = nn.Conv1d(inner, inner, kernel_size=4, groups=inner, padding=3)
        self.x_proj = nn.Linear(inner, 1 + 2 * state)
        self.dt_proj = nn.Linear(1, inner)
        self.log_a = nn.Parameter(torch.log(torch.linspace(1, state, state)).repeat(inner, 1))
        self.out_proj = nn.Linear(inner, dim)
        self.state = state

    def forward(self, x):
        seq = x.shape[1]
        u, gate = self.in_proj(self.norm(x)).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :seq].transpose(1, 2))
        dt, b, c = self.x_proj(u).split([1, self.state, self.state], dim=-1)
        # Mamba starts the step size small (its dt bias): the shift by 4 does that here, softplus(-4) ~ 0.02.
        dt = F.softplus(self.dt_proj(dt) - 4).float()                          # (batch, seq, inner)
        log_decay = -dt.unsqueeze(-1) * torch.exp(self.log_a.float())          # log a_t, (batch, seq, inner, state)
        drive = (dt * u.float()).unsqueeze(-1) * b.float().unsqueeze(2)        # b_t
        y = (scan(log_decay, drive) * c.float().unsqueeze(2)).sum(-1).to(x.dtype)
        return x + self.out_proj(y * F.silu(gate))


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder over a batch whose sequences after the first end early (their tails are padding)."""

    def __init__(self, dim: int, heads: int, layers: int):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True)
        # mask_check=False: with the check, torch.compile takes the slow path (the check cannot be traced), whose
        # padded positions hold values where the fast path's hold zeros, so no compiled variant would match eager.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=True, mask_check=False)

    def forward(self, x):
        padding = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
        padding[1:, x.shape[1] * 3 // 4:] = True
        return self.encoder(x, src_key_padding_mask=padding)


def scan(log_decay: torch.Tensor, drive: torch.Tensor) -> torch.Tensor:
    """h_t = exp(log_decay_t) * h_{t-1} + drive_t along dim 1, from h = 0, chunk by chunk."""
    state, chunks = torch.zeros_like(drive[:, 0]), []
    for start in range(0, drive.shape[1], CHUNK):
        running = torch.cumsum(log_decay[:, start:start + CHUNK], dim=1)
        h = torch.exp(running) * (state.unsqueeze(1) + torch.cumsum(drive[:, start:start + CHUNK] * torch.exp(-running),
                                                                   dim=1))
        chunks.append(h)
        state = h[:, -1]
    return torch.cat(chunks, dim=1)


def get_model(arch: str = "lstm", size: str = "full"):
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    s = SIZES[size]
    if arch == "mamba":
        return nn.Sequential(*(SelectiveScan(s["dim"], s["state"]) for _ in range(s["layers"]))).eval()
    if arch == "encoder":
        return PaddedEncoder(s["dim"], s["heads"], s["layers"]).eval()
    return Recurrent(arch, s["dim"], s["hidden"], s["layers"]).eval()


def get_inputs(arch: str = "lstm", size: str = "full", batch: int = 1):
    torch.manual_seed(0)
    if arch == "encoder":     # a padded batch: one sequence alone has nothing to pad
        batch = max(batch, SIZES[size]["batch"])
    return [torch.randn(batch, SIZES[size]["seq"], SIZES[size]["dim"])]
