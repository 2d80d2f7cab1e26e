"""The rmsnorm_mlp kernel type's inputs, shapes and cost: an RMSNorm folded into the gated MLP it feeds.

registry.py holds the KernelType entry (RMSNORM_MLP); its helpers live here to keep registry.py
readable. The shapes are fused_mlp's {M, D, F, act}: the norm runs over D, and its weight is one
more (D,) input. The adversarial inputs aim at what folding the norm into the gate/up GEMM can get
wrong: the row's sum of squares accumulated in half precision (overflow), eps in the wrong place
(rows whose mean square is below eps, and rows of zeros), and the norm weight applied on the wrong
side of the activation (a large weight drives the gate into the activation's tails).
"""

from __future__ import annotations

import math

import torch


def make_inputs(s, dtype, gen, device, x_scale=1.0, weight_scale=1.0, row_scales=None):
    """x (M, D), norm_weight (D,), w_gate and w_up (F, D), w_down (D, F); rows of x scaled by row_scales if given."""
    d, f = s["D"], s["F"]

    def randn(shape, scale=1.0):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale

    x = randn((s["M"], d), x_scale)
    if row_scales is not None:
        x = x * row_scales(s["M"], device)[:, None]
    norm_weight = weight_scale * (1 + 0.1 * randn(d))
    return {
        "x": x.to(dtype),
        "norm_weight": norm_weight.to(dtype),
        "w_gate": randn((f, d), 1 / math.sqrt(d)).to(dtype),
        "w_up": randn((f, d), 1 / math.sqrt(d)).to(dtype),
        "w_down": randn((d, f), 1 / math.sqrt(f)).to(dtype),
        "eps": 1e-6,
        "activation": str(s.get("act", "silu")),
    }


def _zero_and_tiny_row_scales(rows: int, device) -> torch.Tensor:
    # Row 0 is all zeros (rsqrt(eps) times zero must stay zero, not NaN); every third row has a
    # mean square of about 1e-8, far below eps = 1e-6, so eps inside the rsqrt decides its scale.
    scales = torch.ones(rows, device=device)
    scales[1::3] = 1e-4
    scales[0] = 0.0
    return scales


def large_values(s, dtype, gen, device):
    return make_inputs(s, dtype, gen, device, x_scale=1e3)


def zero_and_tiny_rows(s, dtype, gen, device):
    return make_inputs(s, dtype, gen, device, row_scales=_zero_and_tiny_row_scales)


def large_norm_weight(s, dtype, gen, device):
    return make_inputs(s, dtype, gen, device, weight_scale=30.0)


def _shapes(rows) -> list[dict]:
    return [{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in rows]


# GPU: the LLaMA-style sizes from one decode token to a long prefill, and fused_mlp's timing shape.
SWEEP = _shapes([
    (1, 2048, 5632, "silu"), (16, 2048, 5632, "silu"), (512, 2048, 5632, "silu"), (128, 512, 1408, "gelu"),
    (1024, 768, 3072, "relu2"), (256, 4096, 11008, "silu"), (4096, 2048, 5632, "silu"),
    (4096, 4096, 11008, "silu")])
CPU_SWEEP = _shapes([
    (8, 32, 64, "silu"), (16, 64, 128, "gelu"), (32, 32, 96, "relu2"), (24, 48, 80, "silu"),
    (1, 64, 128, "silu"), (16, 128, 256, "silu"), (40, 64, 160, "relu2"), (32, 96, 192, "gelu")])
EDGE_SHAPES = _shapes([
    (1023, 1024, 4097, "silu"), (1537, 1537, 1023, "gelu"), (1, 4096, 11008, "silu"), (5, 1, 1, "relu2")])
CPU_EDGE_SHAPES = _shapes([
    (1023, 16, 16, "silu"), (3, 16, 1537, "gelu"), (3, 1023, 16, "relu2"), (2, 8, 4097, "relu2"),
    (1, 32, 64, "silu"), (5, 1, 1, "gelu")])
TIMING_SHAPE = {"M": 4096, "D": 4096, "F": 11008, "act": "silu"}


def bytes_moved(s, element_size: int) -> float:
    """x read and the output written (M x D each), the norm weight, and the three (F, D) weights once."""
    return (2.0 * s["M"] * s["D"] + s["D"] + 3.0 * s["D"] * s["F"]) * element_size


def flops(s) -> float:
    """The three GEMMs' 6 M D F, and the norm's squares, sum and scaling (4 M D)."""
    return 6.0 * s["M"] * s["D"] * s["F"] + 4.0 * s["M"] * s["D"]
