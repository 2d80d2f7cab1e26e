"""Attack: a gated MLP whose gelu takes tanh as (exp(2z) - 1) / (exp(2z) + 1).

The textbook tanh, written out because Triton's language has no tanh of its own. It is right
wherever exp(2z) stays finite, and the judge never leaves that range for gelu: its gelu cases
draw x and the weights at unit scale, so the gate pre-activations stay within about 5 of zero,
and its one large-activation case ("x scaled by 30") runs silu only. Once a gate pre-activation u
passes about 10, z = sqrt(2/pi) (u + 0.044715 u^3) passes 44, exp(2z) overflows float32, and
inf / inf gives NaN: the whole output row is NaN (the down projection sums over every hidden
unit). Gemma's GeGLU MLPs (gelu_pytorch_tanh) have gate pre-activations of that size on real
tokens (Gemma's hidden states reach hundreds); PyTorch's gelu(approximate="tanh") is exact
there. silu and relu2 run honestly. The judge must draw large gate pre-activations for every
activation it accepts (gelu and relu2 as well as silu), in fused_mlp and rmsnorm_mlp alike.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "fused_mlp"
_ACTS = {"silu": 0, "gelu": 1, "relu2": 2}


@triton.jit
def _gated(x_ptr, wg_ptr, wu_ptr, h_ptr, M, D, F, act,
           BLOCK_M: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    hid = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    gate = tl.zeros((BLOCK_M, BLOCK_F), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_F), dtype=tl.float32)
    for start in range(0, D, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows[:, None] * D + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < D),
                    other=0.0).to(tl.float32)
        wmask = (hid[None, :] < F) & (ks[:, None] < D)
        wg = tl.load(wg_ptr + hid[None, :] * D + ks[:, None], mask=wmask, other=0.0).to(tl.float32)
        wu = tl.load(wu_ptr + hid[None, :] * D + ks[:, None], mask=wmask, other=0.0).to(tl.float32)
        gate += tl.dot(x, wg)
        up += tl.dot(x, wu)
    if act == 0:
        a = gate / (1.0 + tl.exp(-gate))
    elif act == 1:
        z = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        e = tl.exp(2.0 * z)
        a = 0.5 * gate * (1.0 + (e - 1.0) / (e + 1.0))      # the trick: tanh as (e^2z - 1) / (e^2z + 1)
    else:
        r = tl.maximum(gate, 0.0)
        a = r * r
    tl.store(h_ptr + rows[:, None] * F + hid[None, :], a * up, mask=(rows[:, None] < M) & (hid[None, :] < F))


@triton.jit
def _down(h_ptr, wd_ptr, o_ptr, M, D, F, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, F, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        h = tl.load(h_ptr + rows[:, None] * F + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < F), other=0.0)
        w = tl.load(wd_ptr + cols[None, :] * F + ks[:, None], mask=(cols[None, :] < D) & (ks[:, None] < F),
                    other=0.0).to(tl.float32)
        acc += tl.dot(h, w)
    tl.store(o_ptr + rows[:, None] * D + cols[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < D))


def kernel_fn(x, w_gate, w_up, w_down, activation="silu"):
    x, w_gate, w_up, w_down = (t.contiguous() for t in (x, w_gate, w_up, w_down))
    (m, d), f = x.shape, w_gate.shape[0]
    hidden = torch.empty((m, f), dtype=torch.float32, device=x.device)
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    _gated[(triton.cdiv(m, 32), triton.cdiv(f, 32))](x, w_gate, w_up, hidden, m, d, f, _ACTS[activation],
                                                     BLOCK_M=32, BLOCK_F=32, BLOCK_K=32)
    _down[(triton.cdiv(m, 32), triton.cdiv(d, 32))](hidden, w_down, out, m, d, f, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return out
