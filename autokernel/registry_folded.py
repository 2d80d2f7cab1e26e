"""Inputs, shapes and adversarial cases of the kernel types that fold a norm into what follows it.

rmsnorm_linear computes rmsnorm(x, norm_weight, eps) @ weight.T in one kernel (reference.py);
its registry entry is in autokernel/registry.py, which imports these (kept apart so that the
registry stays readable). A shape is {"M": rows, "N": output features, "K": input features},
named as matmul's are: the profiler and the router build it from an nn.Linear the same way.
"""

from __future__ import annotations

import math

import torch


def _normal(shape, gen, device):
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)


def rmsnorm_linear_inputs(s, dtype, gen, device, x: torch.Tensor | None = None, norm_mean: float = 1.0):
    """x (M, K), norm weight (K,) near norm_mean, weight (N, K) at nn.Linear's initial scale; x may be given."""
    m, n, k = s["M"], s["N"], s["K"]
    x = _normal((m, k), gen, device) if x is None else x
    norm_weight = norm_mean + 0.1 * _normal(k, gen, device)
    weight = _normal((n, k), gen, device) / math.sqrt(k)
    return {"x": x.to(dtype), "norm_weight": norm_weight.to(dtype), "weight": weight.to(dtype), "eps": 1e-6}


def huge_rows(s, dtype, gen, device):
    # Entries up to 6e4 (float16's largest is 65504) and a norm weight near 1.5: the squares
    # overflow float16, and so does x * norm_weight rounded to float16 (a kernel that scales the
    # activation tile, not the weight tile, in half precision): both must stay in float32.
    x = _normal((s["M"], s["K"]), gen, device).clamp(-4, 4) * 1.5e4
    return rmsnorm_linear_inputs(s, dtype, gen, device, x=x, norm_mean=1.5)


def degenerate_rows(s, dtype, gen, device):
    # A zero row (rsqrt(eps) times zero), a constant row, a near-constant row, and rows whose
    # scales span 1e-3 to 1e3: a row scale taken from another row, or eps left out, shows.
    m, k = s["M"], s["K"]
    scales = 10 ** (torch.rand((m, 1), generator=gen, device=device) * 6 - 3)
    x = _normal((m, k), gen, device) * scales
    x[0] = 0.0
    x[1] = 7.0
    x[2] = 5.0 + 1e-3 * _normal(k, gen, device)
    return rmsnorm_linear_inputs(s, dtype, gen, device, x=x)


def _rows(triples):
    return [{"M": m, "N": n, "K": k} for m, n, k in triples]


RMSNORM_LINEAR_SHAPES = {
    # Decode (M = 1, 16), prefill at LLaMA widths (K = 2048 / 4096: q/k/v, gate/up, a 32000 head).
    "sweep": _rows([(1, 2048, 2048), (16, 2048, 2048), (128, 4096, 4096), (512, 2048, 2048), (512, 5632, 2048),
                    (4096, 2048, 2048), (4096, 5632, 2048), (1024, 32000, 2048), (4096, 11008, 4096)]),
    "cpu_sweep": _rows([(1, 16, 16), (4, 32, 64), (16, 64, 32), (32, 48, 80), (8, 128, 64), (64, 32, 128),
                        (24, 40, 96), (16, 32, 256)]),
    "edge": _rows([(1023, 1537, 2049), (1, 4096, 4097), (4097, 1023, 1537), (7, 1, 1023), (5, 1023, 1),
                   (17, 19, 4097)]),
    "cpu_edge": _rows([(1023, 8, 16), (9, 1537, 16), (5, 7, 4097), (1, 33, 64), (33, 1, 17), (17, 19, 1)]),
}


def rmsnorm_linear_bytes(s, element_size: int) -> float:
    """x and the norm weight read, the weight read, the output written: the normalized x never is."""
    return (s["M"] * s["K"] + s["K"] + s["N"] * s["K"] + s["M"] * s["N"]) * element_size


def rmsnorm_linear_flops(s) -> float:
    return 2.0 * s["M"] * s["N"] * s["K"] + 3.0 * s["M"] * s["K"]
