"""fused_mlp: the gated MLP (act(x W_gate^T) * (x W_up^T)) W_down^T in one kernel. Inputs and shapes; gated MLP
modules in a trace (their linears count with them); gated MLP modules routed (nn.Linear children gate / up /
down, or w1 / w3 / w2)."""

from __future__ import annotations

import functools
import math

from torch import nn

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import (Adversarial, KernelType, ModuleMatch, ModuleVariant, Reading,
                                          Recognition, Routing, randn)
from autokernel.kernel_types.mlps import gated_mlp_dims, mlp_linears

# How the plan counts MLPs (profile.json's "mlp_policy").
MLP_POLICY = ("gated MLP modules (gate/up/down linears + activation) count as fused_mlp, not matmul; "
              "ungated MLP linears count as matmul and their activation as other")
# Activation op -> fused_mlp "act" value; relu is taken as the squared-ReLU ("relu2") MLP.
_ACTIVATIONS = {"aten::silu": "silu", "aten::gelu": "gelu", "aten::relu": "relu2"}


def mlp_inputs(s, dtype, gen, device, x_scale=1.0):
    d, f = s["D"], s["F"]
    return {
        "x": randn((s["M"], d), dtype, gen, device, scale=x_scale),
        "w_gate": randn((f, d), dtype, gen, device, scale=1 / math.sqrt(d)),
        "w_up": randn((f, d), dtype, gen, device, scale=1 / math.sqrt(d)),
        "w_down": randn((d, f), dtype, gen, device, scale=1 / math.sqrt(f)),
        "activation": str(s.get("act", "silu")),
    }


# --------------------------------------------------------------------------- the profiler
def recognise_module(module: nn.Module, ops: set[str], roots: list) -> ModuleMatch | None:
    """A gated MLP running silu, gelu or relu. Its linears count as fused_mlp, not matmul, because one fused_mlp
    kernel replaces all of them, so Amdahl's law must see their combined time. Ungated MLPs (GPT-2, BERT) stay
    matmul plus "other"."""
    activation = next((act for op, act in _ACTIVATIONS.items() if op in ops), None)
    if activation is None or gated_mlp_dims(module) is None:
        return None
    return ModuleMatch("fused_mlp", module, functools.partial(_module_shape, module, activation), activation)


def _module_shape(module: nn.Module, activation: str, input_shape: tuple[int, ...], roots: list) -> dict | None:
    if not input_shape:
        return None
    dim, hidden = gated_mlp_dims(module)
    return {"M": math.prod(input_shape[:-1]), "D": dim, "F": hidden, "act": activation}


def is_gated_mlp(module: nn.Module) -> bool:
    """A module the profiler could count as one fused_mlp kernel by its structure (before its activation is seen)."""
    return gated_mlp_dims(module) is not None


# --------------------------------------------------------------------------- the router
def module_variants(module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    """One variant per activation kernels were verified with: which one the module runs, the first-call check decides."""
    linears = mlp_linears(module)
    if linears is None:
        return []
    gate, up, down = linears
    acts = list(dict.fromkeys(shape["act"] for shape in verified_shapes if "act" in shape))
    return [ModuleVariant("fused_mlp", f"fused_mlp act={act}",
                          functools.partial(_read_mlp, gate=gate, up=up, down=down, act=act)) for act in acts]


def _read_mlp(x, gate: nn.Linear, up: nn.Linear, down: nn.Linear, act: str) -> Reading | str:
    hidden, dim = gate.weight.shape
    if x.dim() == 0 or x.shape[-1] != dim:
        return "input size differs from the MLP's"

    def launch(fn, x):
        out = fn(x.reshape(-1, dim).contiguous(), gate.weight.contiguous(), up.weight.contiguous(),
                 down.weight.contiguous(), act)
        return out.reshape(*x.shape[:-1], dim)
    return Reading({"M": math.prod(x.shape[:-1]), "D": dim, "F": hidden, "act": act},
                   (x, gate.weight, up.weight, down.weight), launch)


KERNEL_TYPE = KernelType(
    name="fused_mlp",
    matrix=True,
    description="gated MLP: (act(x W_gate^T) * (x W_up^T)) W_down^T, act in silu / gelu / relu2",
    reference=reference.fused_mlp,
    make_inputs=mlp_inputs,
    smoke_shape={"M": 32, "D": 64, "F": 128, "act": "silu"},
    sweep=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (128, 512, 1408, "silu"), (512, 1024, 2816, "gelu"), (1024, 768, 3072, "relu2"),
        (2048, 2048, 5632, "silu"), (256, 4096, 11008, "silu"), (4096, 1024, 4096, "gelu"),
        (1024, 4096, 14336, "silu"), (4096, 4096, 11008, "silu")]],
    cpu_sweep=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (8, 32, 64, "silu"), (16, 64, 128, "gelu"), (32, 32, 96, "relu2"), (24, 48, 80, "silu"),
        (64, 64, 64, "gelu"), (16, 128, 256, "silu"), (40, 64, 160, "relu2"), (32, 96, 192, "silu")]],
    edge_shapes=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (1023, 1024, 4097, "silu"), (1537, 1537, 1023, "gelu"), (1, 4096, 11008, "silu"), (5, 1, 1, "relu2")]],
    cpu_edge_shapes=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (1023, 16, 16, "silu"), (3, 16, 1537, "gelu"), (3, 1023, 16, "relu2"), (2, 8, 4097, "relu2"),
        (1, 32, 64, "silu"),
        (5, 1, 1, "gelu")]],
    timing_shape={"M": 4096, "D": 4096, "F": 11008, "act": "silu"},
    # silu and gelu each (relu2 has no exponential to overflow): a kernel has a path per activation.
    adversarial=[Adversarial(f"large activations, {act}", {"M": 64, "D": 256, "F": 512, "act": act},
                             lambda s, d, g, dev: mlp_inputs(s, d, g, dev, x_scale=30.0),
                             f"x scaled by 30: gate pre-activations far into {act}'s tails")
                 for act in ("silu", "gelu")],
    bytes_moved=lambda s, e: (2.0 * s["M"] * s["D"] + 3.0 * s["D"] * s["F"]) * e,
    flops=lambda s: 6.0 * s["M"] * s["D"] * s["F"],
    recognise=Recognition(module=recognise_module, replaces_module=is_gated_mlp),
    route=Routing(module_variants=module_variants),
)
