"""rmsnorm: RMSNorm with a weight over the last dims, or over dim 1 of (B, C, ...). Inputs, shapes and
overflow cases; norm modules (also KernelBench's inline form) and aten::rms_norm in a trace; F.rms_norm and
norm modules routed. What it shares with layernorm is in autokernel/kernel_types/norms.py."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.kernel_types import norms, references as reference
from autokernel.kernel_types.base import Adversarial, KernelType, ModuleVariant, Reading, Recognition, Routing, \
    randn, rows


def rmsnorm_inputs(s, dtype, gen, device, x_scale=1.0, eps=1e-6):
    x = randn(norms.x_shape(s), dtype, gen, device, scale=x_scale)
    weight = (1 + 0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": weight, "eps": eps, **({"dim": 1} if "I" in s else {})}


def recognise_module(module: nn.Module, ops: set[str], roots: list):
    """A norm module that does not subtract its mean (norms.norm_kind), or an RMSNorm written inline."""
    kind = norms.norm_kind(module, ops)
    if kind == "rmsnorm" or kind is None and norms.is_inline_rmsnorm(module, ops):
        return norms.module_match("rmsnorm", module, roots)
    return None


def read_rms_norm(input, normalized_shape, weight=None, eps=None):
    if not norms.normalized_weight_matches(normalized_shape, weight):
        return "no weight of the normalized size"
    return norms.read_norm("rmsnorm", input, weight, None, _launch_rms_norm)


def _launch_rms_norm(fn, input, normalized_shape, weight=None, eps=None):
    return norms.launch_rmsnorm(fn, input, weight, torch.finfo(input.dtype).eps if eps is None else eps)


def _read_weightless_last_dim_norm(module: nn.Module, x) -> Reading | str:
    if x.dim() == 0:
        return "a 0-d input"
    return Reading(rows(x.shape), (x,), lambda fn, x: norms.launch_rmsnorm(
        fn, x, norms.norm_param(module, "weight", x, x.shape[-1], 1.0), norms.module_eps(module)))


def module_variants(module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    """A norm module, a norm over dim 1, and RMSNorm over the last dim (a weight of ones) of a module without
    parameters (KernelBench's inline form)."""
    variants = norms.last_dim_variants("rmsnorm", module) + norms.channel_variants("rmsnorm", module, verified_shapes)
    if norms.is_inline_norm_module(module) and not dict(module.named_parameters(recurse=False)):
        variants.append(ModuleVariant("rmsnorm", "rmsnorm (no weight)",
                                      functools.partial(_read_weightless_last_dim_norm, module), rank=(0, 2)))
    return variants


KERNEL_TYPE = KernelType(
    name="rmsnorm",
    profiled_ops=norms.RMSNORM_OPS,
    description="RMSNorm with a weight over the last dimension of an (M, N) tensor, or, with I, over dim 1 "
                "of an (M, N, I) tensor (the channels C of x (B, C, H, W): M = B, N = C, I = H * W)",
    reference=reference.rmsnorm,
    make_inputs=rmsnorm_inputs,
    **norms.SHAPES,
    timing_shape={"M": 8192, "N": 8192},
    adversarial=[
        Adversarial("near-zero values", {"M": 16, "N": 1024},
                    lambda s, d, g, dev: rmsnorm_inputs(s, d, g, dev, x_scale=1e-4), "standard deviation 1e-4"),
        Adversarial("large values", {"M": 16, "N": 1024},
                    lambda s, d, g, dev: rmsnorm_inputs(s, d, g, dev, x_scale=1e3),
                    "standard deviation 1e3: squares overflow float16"),
        Adversarial("large values over dim 1", {"M": 4, "N": 256, "I": 8},
                    lambda s, d, g, dev: rmsnorm_inputs(s, d, g, dev, x_scale=1e3),
                    "standard deviation 1e3 over the channels of each position: squares overflow float16"),
        *norms.eps_cases(rmsnorm_inputs),
    ],
    bytes_moved=lambda s, e: (2.0 * norms.positions(s) * s["N"] + s["N"]) * e,
    flops=lambda s: 4.0 * norms.positions(s) * s["N"],
    recognise=Recognition(op_shape=norms.op_shape, module=recognise_module),
    route=Routing(functions={F.rms_norm: read_rms_norm}, module_variants=module_variants),
)
