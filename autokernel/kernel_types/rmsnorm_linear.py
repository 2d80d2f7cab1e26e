"""rmsnorm_linear: RMSNorm folded into the linear layer after it, rmsnorm(x, norm_weight, eps) @ weight.T in one
kernel. Inputs, shapes and overflow cases; an RMSNorm whose output only nn.Linear layers read counts with them
(one site per linear, the norm's time with the first); such a norm and its linears routed as a fold
(autokernel/routing/fold_routing.py).

A shape is {"M": rows, "N": output features, "K": input features}, named as matmul's are: the
profiler and the router build it from an nn.Linear the same way.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from autokernel.core import patching
from autokernel.kernel_types import norms, references as reference
from autokernel.kernel_types.base import Adversarial, FoldType, KernelType, Reading, normal


def rmsnorm_linear_inputs(s, dtype, gen, device, x: torch.Tensor | None = None, norm_mean: float = 1.0):
    """x (M, K), norm weight (K,) near norm_mean, weight (N, K) at nn.Linear's initial scale; x may be given."""
    m, n, k = s["M"], s["N"], s["K"]
    x = normal((m, k), gen, device) if x is None else x
    norm_weight = norm_mean + 0.1 * normal(k, gen, device)
    weight = normal((n, k), gen, device) / math.sqrt(k)
    return {"x": x.to(dtype), "norm_weight": norm_weight.to(dtype), "weight": weight.to(dtype), "eps": 1e-6}


def huge_rows(s, dtype, gen, device):
    # Entries up to 6e4 (float16's largest is 65504) and a norm weight near 1.5: the squares
    # overflow float16, and so does x * norm_weight rounded to float16 (a kernel that scales the
    # activation tile, not the weight tile, in half precision): both must stay in float32.
    x = normal((s["M"], s["K"]), gen, device).clamp(-4, 4) * 1.5e4
    return rmsnorm_linear_inputs(s, dtype, gen, device, x=x, norm_mean=1.5)


def degenerate_rows(s, dtype, gen, device):
    # A zero row (rsqrt(eps) times zero), a constant row, a near-constant row, and rows whose
    # scales span 1e-3 to 1e3: a row scale taken from another row, or eps left out, shows.
    m, k = s["M"], s["K"]
    scales = 10 ** (torch.rand((m, 1), generator=gen, device=device) * 6 - 3)
    x = normal((m, k), gen, device) * scales
    x[0] = 0.0
    x[1] = 7.0
    x[2] = 5.0 + 1e-3 * normal(k, gen, device)
    return rmsnorm_linear_inputs(s, dtype, gen, device, x=x)


def _rows(triples):
    return [{"M": m, "N": n, "K": k} for m, n, k in triples]


def rmsnorm_linear_bytes(s, element_size: int) -> float:
    """x and the norm weight read, the weight read, the output written: the normalized x never is."""
    return (s["M"] * s["K"] + s["K"] + s["N"] * s["K"] + s["M"] * s["N"]) * element_size


def rmsnorm_linear_flops(s) -> float:
    return 2.0 * s["M"] * s["N"] * s["K"] + 3.0 * s["M"] * s["K"]


# --------------------------------------------------------------------------- the fold
def is_plain_linear(module: nn.Module) -> bool:
    # A subclass may compute something else (quantized, LoRA...); a Linear whose class only our own patches swapped
    # (autokernel/core/patching.py: a fold, a concatenation) is still one.
    return patching.original_class(type(module)) is nn.Linear


def read_rmsnorm_linear(norm: nn.Module, linear: nn.Linear, x) -> Reading | str:
    """A linear's call on the raw input of the RMSNorm folded into it: rmsnorm_linear {M, N, K}."""
    if x.dim() == 0 or x.shape[-1] != linear.in_features or norm.weight.shape != (linear.in_features,):
        return "input size differs from the norm's or the linear's"
    eps, k, n = norms.module_eps(norm), linear.in_features, linear.out_features

    def launch(fn, x):
        out = fn(x.reshape(-1, k).contiguous(), norm.weight.contiguous(), linear.weight.contiguous(), float(eps))
        out = out.reshape(*x.shape[:-1], n)
        return out if linear.bias is None else out + linear.bias
    tensors = (x, norm.weight, linear.weight) + ((linear.bias,) if linear.bias is not None else ())
    return Reading({"M": math.prod(x.shape[:-1]), "N": n, "K": k}, tensors, launch)


FOLD = FoldType(
    "rmsnorm_linear", norms.is_rmsnorm_module, is_plain_linear, read_rmsnorm_linear,
    site_shape=lambda rows, linear, act: {"M": rows, "N": linear.out_features, "K": linear.in_features},
    preference=1,      # after rmsnorm_mlp: a norm feeding a gated MLP folds into the whole MLP, not its linears
    policy="one whose output only nn.Linear layers read counts with them as rmsnorm_linear, one shape per linear, "
           "the norm's time with the first linear")

KERNEL_TYPE = KernelType(
    name="rmsnorm_linear",
    matrix=True,
    description="RMSNorm folded into the linear layer after it: rmsnorm(x, norm_weight) @ W^T, x (M, K), W (N, K)",
    reference=reference.rmsnorm_linear,
    make_inputs=rmsnorm_linear_inputs,
    smoke_shape={"M": 32, "N": 64, "K": 64},
    # Decode (M = 1, 16), prefill at LLaMA widths (K = 2048 / 4096: q/k/v, gate/up, a 32000 head).
    sweep=_rows([(1, 2048, 2048), (16, 2048, 2048), (128, 4096, 4096), (512, 2048, 2048), (512, 5632, 2048),
                 (4096, 2048, 2048), (4096, 5632, 2048), (1024, 32000, 2048), (4096, 11008, 4096)]),
    cpu_sweep=_rows([(1, 16, 16), (4, 32, 64), (16, 64, 32), (32, 48, 80), (8, 128, 64), (64, 32, 128),
                     (24, 40, 96), (16, 32, 256)]),
    edge_shapes=_rows([(1023, 1537, 2049), (1, 4096, 4097), (4097, 1023, 1537), (7, 1, 1023), (5, 1023, 1),
                       (17, 19, 4097)]),
    cpu_edge_shapes=_rows([(1023, 8, 16), (9, 1537, 16), (5, 7, 4097), (1, 33, 64), (33, 1, 17), (17, 19, 1)]),
    timing_shape={"M": 4096, "N": 2048, "K": 2048},
    adversarial=[
        Adversarial("huge rows", {"M": 16, "N": 96, "K": 512}, huge_rows,
                    "entries up to 6e4, norm weight near 1.5: squares and x * norm weight overflow float16"),
        Adversarial("zero, constant and tiny rows", {"M": 16, "N": 96, "K": 512}, degenerate_rows,
                    "a zero row, constant rows, and row scales from 1e-3 to 1e3"),
        norms.fused_eps_case(rmsnorm_linear_inputs, {"M": 16, "N": 96, "K": 512}, width="K"),
    ],
    bytes_moved=rmsnorm_linear_bytes,
    flops=rmsnorm_linear_flops,
    fold=FOLD,
)
