"""layernorm: LayerNorm with weight and bias over the last dims, or over dim 1 of (B, C, ...). Inputs, shapes
and cancellation cases; norm modules and aten::layer_norm in a trace; F.layer_norm and norm modules routed.
What it shares with rmsnorm is in autokernel/kernel_types/norms.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.kernel_types import norms, references as reference
from autokernel.kernel_types.base import Adversarial, KernelType, ModuleVariant, Recognition, Routing


def layernorm_inputs(s, dtype, gen, device, x_scale=1.0, x_offset=0.0, eps=1e-5):
    x = (torch.randn(norms.x_shape(s), generator=gen, device=device) * x_scale + x_offset).to(dtype)
    weight = (1 + 0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    bias = (0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": weight, "bias": bias, "eps": eps, **({"dim": 1} if "I" in s else {})}


def _near_constant(s, dtype, gen, device):
    # Variance ~1e-8 around a mean of 100: E[x^2] - E[x]^2 cancels catastrophically, so a
    # one-pass variance gives garbage while the two-pass or Welford form stays right.
    return layernorm_inputs(s, dtype, gen, device, x_scale=1e-4, x_offset=100.0)


def _large(s, dtype, gen, device):
    # Squares of 1e3 overflow float16: statistics must be accumulated in float32.
    return layernorm_inputs(s, dtype, gen, device, x_scale=1e3)


def recognise_module(module: nn.Module, ops: set[str], roots: list):
    """A norm module that subtracts its mean (norms.norm_kind tells it from an RMSNorm)."""
    return norms.module_match("layernorm", module, roots) if norms.norm_kind(module, ops) == "layernorm" else None


def read_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if not norms.normalized_weight_matches(normalized_shape, weight):
        return "no weight of the normalized size"
    return norms.read_norm("layernorm", input, weight, bias, _launch_layer_norm)


def _launch_layer_norm(fn, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return norms.launch_layernorm(fn, input, weight, bias, eps)


def module_variants(module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    return norms.last_dim_variants("layernorm", module) + norms.channel_variants("layernorm", module, verified_shapes)


KERNEL_TYPE = KernelType(
    name="layernorm",
    profiled_ops=norms.LAYERNORM_OPS,
    description="LayerNorm with weight and bias over the last dimension of an (M, N) tensor, or, with I, over "
                "dim 1 of an (M, N, I) tensor (the channels C of x (B, C, H, W): M = B, N = C, I = H * W)",
    reference=reference.layernorm,
    make_inputs=layernorm_inputs,
    **norms.SHAPES,
    timing_shape={"M": 8192, "N": 4096},
    adversarial=[
        Adversarial("near-zero variance", {"M": 16, "N": 1024}, _near_constant,
                    "mean 100, standard deviation 1e-4"),
        Adversarial("large values", {"M": 16, "N": 1024}, _large, "standard deviation 1e3"),
        Adversarial("near-zero variance over dim 1", {"M": 4, "N": 256, "I": 8}, _near_constant,
                    "mean 100, standard deviation 1e-4, each position over its 256 channels"),
        *norms.eps_cases(layernorm_inputs),
    ],
    bytes_moved=lambda s, e: (2.0 * norms.positions(s) * s["N"] + 2.0 * s["N"]) * e,
    flops=lambda s: 8.0 * norms.positions(s) * s["N"],
    recognise=Recognition(op_shape=norms.op_shape, module=recognise_module),
    route=Routing(functions={F.layer_norm: read_layer_norm}, module_variants=module_variants),
)
