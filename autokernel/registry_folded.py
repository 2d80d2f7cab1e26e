"""Inputs, shapes and adversarial cases of the kernel types that fold a norm into what follows it.

rmsnorm_linear computes rmsnorm(x, norm_weight, eps) @ weight.T in one kernel, and rmsnorm_mlp
fused_mlp(rmsnorm(x, norm_weight, eps), ...) (reference.py). Their registry entries are in
autokernel/registry.py, which imports these (kept apart so that the registry stays readable).
An rmsnorm_linear shape is {"M": rows, "N": output features, "K": input features}, named as
matmul's are: the profiler and the router build it from an nn.Linear the same way.
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


# --------------------------------------------------------------------------- rmsnorm_mlp
# Shapes are fused_mlp's {M, D, F, act}: the norm runs over D, and its weight is one more (D,)
# input. The adversarial inputs aim at what folding the norm into the gate/up GEMMs can get
# wrong: statistics or the x * norm weight product in half precision (overflow), eps in the
# wrong place (rows whose mean square is below eps, a row of zeros), and the norm weight applied
# on the wrong side of the activation (a large weight drives the gate into its tails).
def rmsnorm_mlp_inputs(s, dtype, gen, device, x: torch.Tensor | None = None, weight_scale: float = 1.0):
    """x (M, D), norm_weight (D,) near weight_scale, w_gate and w_up (F, D), w_down (D, F); x may be given (float32)."""
    d, f = s["D"], s["F"]
    x = _normal((s["M"], d), gen, device) if x is None else x
    norm_weight = weight_scale * (1 + 0.1 * _normal(d, gen, device))
    return {
        "x": x.to(dtype),
        "norm_weight": norm_weight.to(dtype),
        "w_gate": (_normal((f, d), gen, device) / math.sqrt(d)).to(dtype),
        "w_up": (_normal((f, d), gen, device) / math.sqrt(d)).to(dtype),
        "w_down": (_normal((d, f), gen, device) / math.sqrt(f)).to(dtype),
        "eps": 1e-6,
        "activation": str(s.get("act", "silu")),
    }


def rmsnorm_mlp_huge_rows(s, dtype, gen, device):
    # Entries of standard deviation 1.5e4 (up to 6e4) and a norm weight near 2: x^2, and in most
    # rows x * norm_weight rounded to float16 for the tensor cores, overflow float16.
    x = (_normal((s["M"], s["D"]), gen, device) * 1.5e4).clamp(-6e4, 6e4)
    return rmsnorm_mlp_inputs(s, dtype, gen, device, x=x, weight_scale=2.0)


def rmsnorm_mlp_zero_and_tiny_rows(s, dtype, gen, device):
    # Row 0 is all zeros (rsqrt(eps) times zero must stay zero, not NaN); every third row has a
    # mean square of about 1e-8, far below eps = 1e-6, so eps inside the rsqrt decides its scale.
    scales = torch.ones((s["M"], 1), device=device)
    scales[1::3] = 1e-4
    scales[0] = 0.0
    return rmsnorm_mlp_inputs(s, dtype, gen, device, x=_normal((s["M"], s["D"]), gen, device) * scales)


def rmsnorm_mlp_large_norm_weight(s, dtype, gen, device):
    return rmsnorm_mlp_inputs(s, dtype, gen, device, weight_scale=30.0)


def _mlp_shapes(rows) -> list[dict]:
    return [{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in rows]


RMSNORM_MLP_SHAPES = {
    # The LLaMA-style sizes from one decode token to a long prefill, and fused_mlp's timing shape.
    "sweep": _mlp_shapes([
        (1, 2048, 5632, "silu"), (16, 2048, 5632, "silu"), (512, 2048, 5632, "silu"), (128, 512, 1408, "gelu"),
        (1024, 768, 3072, "relu2"), (256, 4096, 11008, "silu"), (4096, 2048, 5632, "silu"),
        (4096, 4096, 11008, "silu")]),
    "cpu_sweep": _mlp_shapes([
        (8, 32, 64, "silu"), (16, 64, 128, "gelu"), (32, 32, 96, "relu2"), (24, 48, 80, "silu"),
        (1, 64, 128, "silu"), (16, 128, 256, "silu"), (40, 64, 160, "relu2"), (32, 96, 192, "gelu")]),
    "edge": _mlp_shapes([
        (1023, 1024, 4097, "silu"), (1537, 1537, 1023, "gelu"), (1, 4096, 11008, "silu"), (5, 1, 1, "relu2")]),
    "cpu_edge": _mlp_shapes([
        (1023, 16, 16, "silu"), (3, 16, 1537, "gelu"), (3, 1023, 16, "relu2"), (2, 8, 4097, "relu2"),
        (1, 32, 64, "silu"), (5, 1, 1, "gelu")]),
}


def rmsnorm_mlp_bytes(s, element_size: int) -> float:
    """x read and the output written (M x D each), the norm weight, and the three (F, D) weights once."""
    return (2.0 * s["M"] * s["D"] + s["D"] + 3.0 * s["D"] * s["F"]) * element_size


def rmsnorm_mlp_flops(s) -> float:
    """The three GEMMs' 6 M D F, and the norm's squares, sum and scaling (4 M D)."""
    return 6.0 * s["M"] * s["D"] * s["F"] + 4.0 * s["M"] * s["D"]
