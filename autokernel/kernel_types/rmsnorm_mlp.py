"""rmsnorm_mlp: RMSNorm folded into the gated MLP it feeds, fused_mlp(rmsnorm(x, norm_weight, eps), ...) in one
kernel. Inputs, shapes and the cases folding gets wrong; an RMSNorm whose output only a gated MLP reads counts
with it; such a norm and its MLP routed as a fold (autokernel/routing/fold_routing.py).

Shapes are fused_mlp's {M, D, F, act}: the norm runs over D, and its weight is one more (D,)
input. The adversarial inputs aim at what folding the norm into the gate/up GEMMs can get
wrong: statistics or the x * norm weight product in half precision (overflow), eps in the
wrong place (rows whose mean square is below eps, a row of zeros), and the norm weight applied
on the wrong side of the activation (a large weight drives the gate into its tails).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from autokernel.kernel_types import norms, references as reference
from autokernel.kernel_types.base import Adversarial, FoldType, KernelType, Reading, normal
from autokernel.kernel_types.mlps import is_gated_mlp_module, mlp_activation, mlp_linears


def rmsnorm_mlp_inputs(s, dtype, gen, device, x: torch.Tensor | None = None, weight_scale: float = 1.0):
    """x (M, D), norm_weight (D,) near weight_scale, w_gate and w_up (F, D), w_down (D, F); x may be given (float32)."""
    d, f = s["D"], s["F"]
    x = normal((s["M"], d), gen, device) if x is None else x
    norm_weight = weight_scale * (1 + 0.1 * normal(d, gen, device))
    return {
        "x": x.to(dtype),
        "norm_weight": norm_weight.to(dtype),
        "w_gate": (normal((f, d), gen, device) / math.sqrt(d)).to(dtype),
        "w_up": (normal((f, d), gen, device) / math.sqrt(d)).to(dtype),
        "w_down": (normal((d, f), gen, device) / math.sqrt(f)).to(dtype),
        "eps": 1e-6,
        "activation": str(s.get("act", "silu")),
    }


def rmsnorm_mlp_huge_rows(s, dtype, gen, device):
    # Entries of standard deviation 1.5e4 (up to 6e4) and a norm weight near 2: x^2, and in most
    # rows x * norm_weight rounded to float16 for the tensor cores, overflow float16.
    x = (normal((s["M"], s["D"]), gen, device) * 1.5e4).clamp(-6e4, 6e4)
    return rmsnorm_mlp_inputs(s, dtype, gen, device, x=x, weight_scale=2.0)


def rmsnorm_mlp_zero_and_tiny_rows(s, dtype, gen, device):
    # Row 0 is all zeros (rsqrt(eps) times zero must stay zero, not NaN); every third row has a
    # mean square of about 1e-8, far below eps = 1e-6, so eps inside the rsqrt decides its scale.
    scales = torch.ones((s["M"], 1), device=device)
    scales[1::3] = 1e-4
    scales[0] = 0.0
    return rmsnorm_mlp_inputs(s, dtype, gen, device, x=normal((s["M"], s["D"]), gen, device) * scales)


def rmsnorm_mlp_large_norm_weight(s, dtype, gen, device):
    return rmsnorm_mlp_inputs(s, dtype, gen, device, weight_scale=30.0)


def _mlp_shapes(rows) -> list[dict]:
    return [{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in rows]


def rmsnorm_mlp_bytes(s, element_size: int) -> float:
    """x read and the output written (M x D each), the norm weight, and the three (F, D) weights once."""
    return (2.0 * s["M"] * s["D"] + s["D"] + 3.0 * s["D"] * s["F"]) * element_size


def rmsnorm_mlp_flops(s) -> float:
    """The three GEMMs' 6 M D F, and the norm's squares, sum and scaling (4 M D)."""
    return 6.0 * s["M"] * s["D"] * s["F"] + 4.0 * s["M"] * s["D"]


# --------------------------------------------------------------------------- the fold
def read_rmsnorm_mlp(norm: nn.Module, mlp: nn.Module, x) -> Reading | str:
    """A gated MLP's call on the raw input of the RMSNorm folded into it: rmsnorm_mlp {M, D, F, act}."""
    gate, up, down = mlp_linears(mlp)
    hidden, dim = gate.weight.shape
    if x.dim() == 0 or x.shape[-1] != dim or norm.weight.shape != (dim,):
        return "input size differs from the norm's or the MLP's"
    eps, act = norms.module_eps(norm), mlp_activation(mlp)

    def launch(fn, x):
        out = fn(x.reshape(-1, dim).contiguous(), norm.weight.contiguous(), gate.weight.contiguous(),
                 up.weight.contiguous(), down.weight.contiguous(), float(eps), act)
        return out.reshape(*x.shape[:-1], dim)
    return Reading({"M": math.prod(x.shape[:-1]), "D": dim, "F": hidden, "act": act},
                   (x, norm.weight, gate.weight, up.weight, down.weight), launch)


def _site_shape(rows: int, mlp: nn.Module, act: str | None) -> dict:
    gate = mlp_linears(mlp)[0]
    return {"M": rows, "D": gate.in_features, "F": gate.out_features, "act": act}


FOLD = FoldType(
    "rmsnorm_mlp", norms.is_rmsnorm_module, is_gated_mlp_module, read_rmsnorm_mlp, site_shape=_site_shape,
    preference=0,      # a norm feeding a gated MLP folds into the whole MLP before its gate and up linears
    policy="an RMSNorm whose output only a gated MLP reads counts with it as rmsnorm_mlp",
    # Planned only where the router will read the activation the trace shows, so no job is planned
    # that verify cannot route.
    plannable=lambda mlps, traced: traced == [mlp_activation(mlp) for mlp in mlps])

_NORM_MLP_CASE = {"M": 16, "D": 256, "F": 128, "act": "silu"}
KERNEL_TYPE = KernelType(
    name="rmsnorm_mlp",
    matrix=True,
    description="RMSNorm over D, then the gated MLP: fused_mlp(rmsnorm(x, norm_weight, eps), W_gate, W_up, W_down)",
    reference=reference.rmsnorm_mlp,
    make_inputs=rmsnorm_mlp_inputs,
    smoke_shape={"M": 32, "D": 64, "F": 128, "act": "silu"},
    # The LLaMA-style sizes from one decode token to a long prefill, and fused_mlp's timing shape.
    sweep=_mlp_shapes([
        (1, 2048, 5632, "silu"), (16, 2048, 5632, "silu"), (512, 2048, 5632, "silu"), (128, 512, 1408, "gelu"),
        (1024, 768, 3072, "relu2"), (256, 4096, 11008, "silu"), (4096, 2048, 5632, "silu"),
        (4096, 4096, 11008, "silu")]),
    cpu_sweep=_mlp_shapes([
        (8, 32, 64, "silu"), (16, 64, 128, "gelu"), (32, 32, 96, "relu2"), (24, 48, 80, "silu"),
        (1, 64, 128, "silu"), (16, 128, 256, "silu"), (40, 64, 160, "relu2"), (32, 96, 192, "gelu")]),
    edge_shapes=_mlp_shapes([
        (1023, 1024, 4097, "silu"), (1537, 1537, 1023, "gelu"), (1, 4096, 11008, "silu"), (5, 1, 1, "relu2")]),
    cpu_edge_shapes=_mlp_shapes([
        (1023, 16, 16, "silu"), (3, 16, 1537, "gelu"), (3, 1023, 16, "relu2"), (2, 8, 4097, "relu2"),
        (1, 32, 64, "silu"), (5, 1, 1, "gelu")]),
    timing_shape={"M": 4096, "D": 4096, "F": 11008, "act": "silu"},
    adversarial=[
        Adversarial("huge rows", _NORM_MLP_CASE, rmsnorm_mlp_huge_rows,
                    "entries up to 6e4, norm weight near 2: x^2 and x * norm weight overflow float16"),
        Adversarial("zero and tiny rows", _NORM_MLP_CASE, rmsnorm_mlp_zero_and_tiny_rows,
                    "a row of zeros, and rows whose mean square (1e-8) is below eps"),
        *[Adversarial(f"large norm weight, {act}", {**_NORM_MLP_CASE, "M": 64, "F": 512, "act": act},
                      rmsnorm_mlp_large_norm_weight, f"norm weight near 30: gate pre-activations in {act}'s tails")
          for act in ("silu", "gelu")],
        norms.fused_eps_case(rmsnorm_mlp_inputs, _NORM_MLP_CASE, width="D"),
    ],
    bytes_moved=rmsnorm_mlp_bytes,
    flops=rmsnorm_mlp_flops,
    fold=FOLD,
)
