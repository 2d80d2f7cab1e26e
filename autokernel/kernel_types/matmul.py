"""matmul: C = A @ B. Inputs, shapes and the TF32 allowance; aten::mm / addmm / linear... in a trace; F.linear,
(..., K) @ (K, N) matmuls and nn.Linear modules routed (leading dims flattened into M)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.core import patching
from autokernel.core.dtypes import pytorch_fp32_matmul_uses_tf32
from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import (Adversarial, Inputs, KernelType, ModuleVariant, Reading, Recognition,
                                          Routing, rand_uniform, randn)

# The attribute of an nn.Linear that holds its weight transposed to the (K, N) layout the matmul
# kernels take, with the weight version it was made from. Made on eager calls, read inside
# torch.compile as it is, so a compiled graph does not copy it on every forward.
TRANSPOSED_WEIGHT = "_autokernel_weight_t"


# --------------------------------------------------------------------------- inputs
def matmul_inputs(s, dtype, gen, device):
    return {"a": randn((s["M"], s["K"]), dtype, gen, device), "b": randn((s["K"], s["N"]), dtype, gen, device)}


def matmul_high_dynamic_range(s, dtype, gen, device):
    # Rows of a and columns of b span 10^-2..10^1, so a sloppy accumulator or a low-precision
    # intermediate loses the small rows while the output stays inside float16's range.
    row_scale = 10 ** rand_uniform((s["M"], 1), gen, device, -2, 1)
    col_scale = 10 ** rand_uniform((1, s["N"]), gen, device, -2, 1)
    a = (torch.randn((s["M"], s["K"]), generator=gen, device=device) * row_scale).to(dtype)
    b = (torch.randn((s["K"], s["N"]), generator=gen, device=device) * col_scale).to(dtype)
    return {"a": a, "b": b}


def matmul_linear_layout(s, dtype, gen, device):
    """b as an nn.Linear hands it over: the transpose of an (N, K) weight, strides (1, K). The router passes this
    view where the weight's (K, N) copy would have unaligned rows (launch_linear), so every kept kernel is judged on
    it."""
    return {"a": randn((s["M"], s["K"]), dtype, gen, device), "b": randn((s["N"], s["K"]), dtype, gen, device).t()}


# TF32 keeps 10 of float32's 23 mantissa bits: an operand changes by a factor (1 + d) with
# -2^-10 < d <= 0 when the tensor cores drop the low bits, |d| <= 2^-11 when it is rounded.
TF32_UNIT = 2.0 ** -10
# The probability, per output element, that TF32's error exceeds the allowance (so a correct
# kernel fails): small enough for every judge run there will ever be.
TF32_FALSE_FAILURE = 1e-15


def tf32_matmul_allowance(inputs: Inputs, oracle: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """The error PyTorch's own float32 a @ b carries under TF32, per output element; None without TF32.

    Term k of C_ij = sum_k a_ik b_kj becomes a_ik b_kj (1 + d_a)(1 + d_b). Model the cuts d as
    independent and uniform over their range (width U = 2^-10, as rounding errors of random data
    are). Then:
    - their means add up to at most U |C_ij| (truncation's bias; zero when rounded);
    - around the means, a_ik b_kj (d_a + d_b) are independent symmetric uniforms, which are
      strictly sub-Gaussian: the sum exceeds z * sigma with probability at most 2 exp(-z^2 / 2),
      where sigma^2 = (U^2 / 6) sum_k a_ik^2 b_kj^2 and z = sqrt(2 ln(2 / p));
    - the d_a d_b terms add at most U^2 sum_k |a_ik b_kj| <= U^2 sqrt(K) sqrt(sum_k a_ik^2 b_kj^2).
    So the allowance is U |C_ij| + (z U / sqrt(6) + U^2 sqrt(K)) sqrt(sum_k a_ik^2 b_kj^2): it grows
    as sqrt(K) times the operands' magnitudes, about 0.4% of the output's RMS for Gaussian inputs,
    and it stays near the typical error of bfloat16 operands (eight times coarser), so most of a
    bfloat16 product still fails. Float32 accumulation error is the dtype tolerance's part, as
    without TF32.
    """
    if dtype != torch.float32 or not pytorch_fp32_matmul_uses_tf32():
        return None
    a, b = inputs["a"].double(), inputs["b"].double()
    spread = (a.square() @ b.square()).sqrt()
    z = math.sqrt(2 * math.log(2 / TF32_FALSE_FAILURE))
    unit = TF32_UNIT
    return unit * oracle.double().abs() + (z * unit / math.sqrt(6) + unit ** 2 * math.sqrt(a.shape[1])) * spread


# --------------------------------------------------------------------------- the profiler
def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    if op == "aten::linear":
        x, weight = shapes[0], shapes[1]
        return {"M": math.prod(x[:-1]), "N": weight[0], "K": x[-1]} if x and weight else None
    a, b = (shapes[1], shapes[2]) if op in ("aten::addmm", "aten::baddbmm") else (shapes[0], shapes[1])
    if not a or not b:
        return None
    # Batched products become one tall product with the same work: batch * M rows.
    batch = math.prod(b[:-2]) if len(a) <= 2 < len(b) else 1
    return {"M": math.prod(a[:-1]) * batch, "N": b[-1] if len(b) >= 2 else 1, "K": a[-1]}


# --------------------------------------------------------------------------- the router
def transposed_weight(linear_weight: torch.Tensor, owner: nn.Module | None = None) -> torch.Tensor:
    """weight.T as a contiguous (K, N) matrix, kept on its module and made again only after the weight changes."""
    if owner is None:
        return linear_weight.t().contiguous()
    cached = owner.__dict__.get(TRANSPOSED_WEIGHT)
    if torch.compiler.is_compiling():
        return cached[1] if cached is not None else linear_weight.t().contiguous()
    if cached is None or cached[0] != linear_weight._version or cached[1].shape[::-1] != linear_weight.shape:
        cached = (linear_weight._version, linear_weight.t().contiguous())
        owner.__dict__[TRANSPOSED_WEIGHT] = cached
    return cached[1]


def read_linear(input, weight, bias=None):
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or input.dim() == 0:
        return "not a (..., K) input with an (N, K) weight"
    shape = {"M": math.prod(input.shape[:-1]), "N": weight.shape[0], "K": input.shape[-1]}
    return Reading(shape, (input, weight) + ((bias,) if bias is not None else ()), launch_linear)


def linear_b(weight: torch.Tensor, owner: nn.Module | None = None) -> torch.Tensor:
    """The (K, N) operand a Linear's product takes: the weight's contiguous transpose, kept on its module, unless that
    copy's rows would not start on 16-byte boundaries (N = 50257, GPT-2's head) while the weight's own rows do. Then
    the weight's transposed view: a kernel reads it by TMA as it is, where the copy's rows cost a padded copy of the
    whole weight on every call (a 77 MB copy: 178 us for the head against 87 us from the view, H200, 2026-11-29)."""
    n, k = weight.shape
    size = weight.element_size()
    if (n * size) % 16 and (k * size) % 16 == 0 and weight.stride(1) == 1:
        return weight.t()
    return transposed_weight(weight, owner)


def launch_linear(fn, input, weight, bias=None, owner=None):
    k, n = input.shape[-1], weight.shape[0]
    out = fn(input.reshape(-1, k).contiguous(), linear_b(weight, owner)).reshape(*input.shape[:-1], n)
    return out if bias is None else out + bias


def read_matmul(input, other, *, out=None):
    if out is not None or other.dim() != 2 or input.dim() == 0:
        return "only (..., K) @ (K, N) without out= runs as one 2-D matmul"
    shape = {"M": math.prod(input.shape[:-1]), "N": other.shape[1], "K": input.shape[-1]}
    return Reading(shape, (input, other), _launch_matmul)


def _launch_matmul(fn, input, other, *, out=None):
    k, n = input.shape[-1], other.shape[1]
    return fn(input.reshape(-1, k).contiguous(), other.contiguous()).reshape(*input.shape[:-1], n)


def module_variants(module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    # A subclass may compute something else (quantized, LoRA...); a Linear whose class only our own patches swapped
    # (autokernel/core/patching.py: a fold, a concatenation) is still one.
    if patching.original_class(type(module)) is not nn.Linear:
        return []

    def read(x):
        reading = read_linear(x, module.weight, module.bias)
        if isinstance(reading, str):
            return reading
        return Reading(reading.shape, reading.tensors,
                       lambda fn, x: launch_linear(fn, x, module.weight, module.bias, owner=module))
    return [ModuleVariant("matmul", "matmul", read, needs_check=False)]


KERNEL_TYPE = KernelType(
    name="matmul",
    profiled_ops=frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}),
    matrix=True,
    description="C = A @ B, A (M, K), B (K, N)",
    reference=reference.matmul,
    make_inputs=matmul_inputs,
    smoke_shape={"M": 64, "N": 64, "K": 64},
    # Big squares, the small-M model shapes (512 tokens), split-K (K much larger than M and N),
    # a tall-skinny output and an irregular one with unaligned rows.
    sweep=[{"M": m, "N": n, "K": k} for m, n, k in [
        (256, 256, 256), (512, 1024, 768), (512, 2048, 5632), (128, 4096, 4096), (4096, 4096, 128),
        (4096, 11008, 4096), (2053, 5921, 2949), (256, 256, 131072), (32768, 32, 4096), (4096, 4096, 4096)]],
    cpu_sweep=[{"M": m, "N": n, "K": k} for m, n, k in [
        (16, 16, 16), (32, 64, 32), (64, 32, 128), (128, 128, 64), (48, 80, 96), (96, 64, 160),
        (256, 16, 64), (64, 128, 256), (16, 32, 2048)]],
    edge_shapes=[{"M": m, "N": n, "K": k} for m, n, k in [
        (1023, 1537, 4097), (4097, 1023, 1537), (1, 4096, 4096), (7, 1023, 16385), (4096, 1, 1023),
        (1537, 1537, 1)]],
    cpu_edge_shapes=[{"M": m, "N": n, "K": k} for m, n, k in [
        (1023, 8, 16), (9, 1537, 16), (5, 7, 4097), (1, 33, 64), (33, 1, 17), (17, 19, 1)]],
    timing_shape={"M": 4096, "N": 4096, "K": 4096},
    adversarial=[Adversarial("high dynamic range", {"M": 128, "N": 96, "K": 256}, matmul_high_dynamic_range,
                             "row and column scales from 0.01 to 10"),
                 Adversarial("a Linear's weight", {"M": 96, "N": 203, "K": 160}, matmul_linear_layout,
                             "b is the transposed view of an (N, K) weight, as the router passes an unaligned N")],
    bytes_moved=lambda s, e: (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * e,
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"],
    error_allowance=tf32_matmul_allowance,
    recognise=Recognition(op_shape=op_shape),
    route=Routing(functions={F.linear: read_linear, torch.matmul: read_matmul, torch.Tensor.matmul: read_matmul,
                             torch.mm: read_matmul, torch.Tensor.mm: read_matmul},
                  module_variants=module_variants, kept_attributes=(TRANSPOSED_WEIGHT,)),
)
