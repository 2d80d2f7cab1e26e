"""What the two norm types, layernorm and rmsnorm, share: their shapes, the joint test that tells which of the
two a norm module is, and how a norm call or module is read and launched.

A norm's input is (M, N) normalized over the last dim, or, with "I", (M, N, I) over dim 1 (the
channels C of x (B, C, H, W): M = B, N = C, I = H * W). Without "I" no dim is passed, so kernel
files written before the dim-1 form keep working at the shapes they were verified at. A norm over
the last k dims (LayerNorm((C, H, W))) is a norm over one flattened dim of their product.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch import nn

from autokernel.kernel_types import matmul
from autokernel.kernel_types.base import (Adversarial, ModuleMatch, ModuleVariant, Reading, normal,
                                          recorded_argument, rows)

LAYERNORM, RMSNORM = "layernorm", "rmsnorm"
# The aten ops each norm type is counted by (their profiled_ops), read here too to tell the two apart.
LAYERNORM_OPS = frozenset({"aten::layer_norm", "aten::native_layer_norm"})
RMSNORM_OPS = frozenset({"aten::rms_norm", "aten::_fused_rms_norm"})
_MATMUL_OPS = matmul.KERNEL_TYPE.profiled_ops      # a module that runs a matmul is no norm
_ROOT_MEAN_SQUARE_OPS = {"aten::rsqrt", "aten::sqrt", "aten::norm", "aten::linalg_vector_norm"}
_MEAN_SUBTRACTION_OPS = {"aten::sub", "aten::var", "aten::var_mean"}
# The root ops of an RMSNorm written inline, x / sqrt(mean(x ** 2, dim) + eps) or x * rsqrt(...).
_INLINE_RMSNORM_OPS = {"aten::pow", "aten::mul", "aten::square", "aten::mean", "aten::add", "aten::sqrt",
                       "aten::rsqrt", "aten::div", "aten::reciprocal", "aten::to", "aten::_to_copy", "aten::type_as"}


# --------------------------------------------------------------------------- shapes
def x_shape(s) -> tuple[int, ...]:
    return (s["M"], s["N"], int(s["I"])) if "I" in s else (s["M"], s["N"])


def positions(s) -> int:
    """Elements normalized as one group are N; there are M * I groups (I = 1 when absent)."""
    return s["M"] * int(s.get("I", 1))


# The last-dim form {M, N}, then the dim-1 form {M, N, I} (KernelBench's (16, 64, 256 * 256) first).
SWEEP = [{"M": m, "N": n} for m, n in [
    (1, 768), (128, 1024), (4096, 2048), (2048, 4096), (512, 16384), (8192, 4096), (8192, 8192)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(16, 64, 65536), (8, 256, 4096), (64, 3, 1024)]]
CPU_SWEEP = [{"M": m, "N": n} for m, n in [
    (1, 64), (4, 128), (16, 256), (8, 512), (32, 32), (64, 64), (3, 1024)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(2, 16, 64), (3, 7, 33)]] + [{"M": 2, "N": 2048}]
EDGE = [{"M": m, "N": n} for m, n in [(1023, 1023), (17, 4097), (1537, 1537), (1, 1), (4096, 1)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(3, 1023, 17), (1, 1, 4097)]]
CPU_EDGE = [{"M": m, "N": n} for m, n in [(3, 1023), (2, 4097), (5, 1537), (1, 1), (7, 1)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(2, 1023, 5), (1, 1, 37), (5, 9, 1)]]
# The shapes both norm types are checked at (KernelType keywords).
SHAPES = {"smoke_shape": {"M": 32, "N": 128}, "sweep": SWEEP, "cpu_sweep": CPU_SWEEP, "edge_shapes": EDGE,
          "cpu_edge_shapes": CPU_EDGE}


# --------------------------------------------------------------------------- the profiler
def eps_cases(make_inputs: Callable) -> list[Adversarial]:
    """Adversarial cases where eps decides the result: rows whose mean square (or variance) is near eps, at two
    eps far apart. A kernel must use the eps it is given: models differ (LLaMA 2 1e-5, BERT 1e-12, some 1e-2), and
    one fixed eps, the judge's default or another, fails one of the two."""
    return [Adversarial(f"eps {eps:g} near the rows' scale", {"M": 16, "N": 1024},
                        functools.partial(_with_eps, make_inputs, x_scale=scale, eps=eps),
                        f"eps {eps:g}, standard deviation {scale:g}: eps about half of what is normalized by")
            for eps, scale in ((1e-5, 3e-3), (1e-2, 0.1))]


def _with_eps(make_inputs: Callable, s, dtype, gen, device, *, x_scale: float, eps: float) -> dict:
    return make_inputs(s, dtype, gen, device, x_scale=x_scale, eps=eps)


def fused_eps_case(make_inputs: Callable, shape: dict, width: str) -> Adversarial:
    """The eps case of a norm folded into what follows it (rmsnorm_linear, rmsnorm_mlp), whose other cases all
    carry eps 1e-6: eps 1e-2 with rows of mean square 1e-2 (x of `width` columns), so that eps is half the
    normalizer and a kernel with a fixed eps, not the one it is given, is off by about 40%."""
    def inputs(s, dtype, gen, device):
        x = normal((s["M"], s[width]), gen, device) * 0.1
        return {**make_inputs(s, dtype, gen, device, x=x), "eps": 1e-2}
    return Adversarial("the model's own eps", shape, inputs, "eps 1e-2, rows of mean square 1e-2: the eps given is "
                                                             "the eps used")


def module_eps(module: nn.Module) -> float | None:
    """The module's float eps (eps or variance_epsilon), or None: what a norm module must carry to be read as one."""
    return next((value for value in (getattr(module, name, None) for name in ("eps", "variance_epsilon"))
                 if isinstance(value, float)), None)


def is_rmsnorm_module(module: nn.Module) -> bool:
    """A module a norm fold may start from: named like RMSNorm, a 1-D weight its only parameter, a float eps.
    What it computes is inferred, so the router checks the folded result against its forward."""
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    return (RMSNORM in type(module).__name__.lower() and weight is not None and weight.dim() == 1
            and set(params) == {"weight"} and not any(module.children()) and module_eps(module) is not None)


def norm_kind(module: nn.Module, ops: set[str]) -> str | None:
    """rmsnorm or layernorm for a leaf module whose only parameters are a 1-D weight (and bias): rmsnorm when it
    runs rsqrt / sqrt / rms_norm without subtracting a mean, layernorm when it subtracts the mean (class names
    containing RMSNorm / LayerNorm decide ties)."""
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or set(params) - {"weight", "bias"} or any(module.children()) or ops & _MATMUL_OPS):
        return None
    class_name = type(module).__name__.lower()
    if RMSNORM in class_name or ops & RMSNORM_OPS:
        return RMSNORM
    if LAYERNORM in class_name or ops & LAYERNORM_OPS or ("aten::mean" in ops and ops & _MEAN_SUBTRACTION_OPS):
        return LAYERNORM
    return RMSNORM if ops & _ROOT_MEAN_SQUARE_OPS else None


def is_inline_rmsnorm(module: nn.Module, ops: set[str]) -> bool:
    """A leaf module without a weight (or with a 1-D one) and with a float eps (the one rule module_eps),
    whose own ops are only an RMSNorm's: KernelBench's inline form."""
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (set(params) - {"weight"} or (weight is not None and weight.dim() != 1) or any(module.children())
            or module_eps(module) is None):
        return False
    return bool("aten::mean" in ops and ops & {"aten::sqrt", "aten::rsqrt"} and ops <= _INLINE_RMSNORM_OPS)


def module_match(kernel_type: str, module: nn.Module, roots: list) -> ModuleMatch:
    mean_dims = [recorded_argument(root.event, "dim") for root in roots if root.name == "aten::mean"]
    return ModuleMatch(kernel_type, module, functools.partial(_module_shape, module, mean_dims))


def _module_shape(module: nn.Module, mean_dims: list, input_shape: tuple[int, ...], roots: list) -> dict | None:
    """A norm's shape: over dim 1 of (B, C, ...) when its means say so ({M: B, N: C, I: the rest}),
    else over as many trailing dims as its weight has (LayerNorm((C, H, W)): three), one without a
    weight over the last."""
    if not input_shape:
        return None
    ndim = len(input_shape)
    dims = {tuple(d) if isinstance(d, (list, tuple)) else (d,) for d in mean_dims}
    if len(dims) == 1 and ndim >= 3:
        (normalized,) = dims
        if all(isinstance(d, int) for d in normalized) and sorted(d % ndim for d in normalized) == [1]:
            return {"M": input_shape[0], "N": input_shape[1], "I": math.prod(input_shape[2:])}
    weight = getattr(module, "weight", None)
    return rows(input_shape, weight.dim() if isinstance(weight, torch.Tensor) else 1)


def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    if not shapes[0]:
        return None
    normalized = recorded_argument(event, "normalized_shape")
    return rows(shapes[0], len(normalized) if isinstance(normalized, (list, tuple)) and normalized else 1)


# --------------------------------------------------------------------------- the router: calls
def read_norm(kernel_type: str, x, weight, bias, launch: Callable) -> Reading | str:
    trailing = weight.dim() if isinstance(weight, torch.Tensor) else 1
    if weight is None or trailing == 0 or x.dim() < trailing or weight.shape != x.shape[x.dim() - trailing:]:
        return "no weight of the normalized size"
    if kernel_type == LAYERNORM and (bias is None or bias.shape != weight.shape):
        return "layernorm kernels take a bias"
    params = (weight, bias) if kernel_type == LAYERNORM else (weight,)
    shape = {"M": math.prod(x.shape[:x.dim() - trailing]), "N": weight.numel()}
    return Reading(shape, (x, *params), launch)


def launch_layernorm(fn, x, weight, bias, eps):
    n = weight.numel()
    return fn(x.reshape(-1, n).contiguous(), weight.reshape(n).contiguous(), bias.reshape(n).contiguous(),
              float(eps)).reshape(x.shape)


def launch_rmsnorm(fn, x, weight, eps):
    n = weight.numel()
    return fn(x.reshape(-1, n).contiguous(), weight.reshape(n).contiguous(), float(eps)).reshape(x.shape)


def normalized_weight_matches(normalized_shape, weight) -> bool:
    return weight is not None and tuple(weight.shape) == tuple(normalized_shape)


# --------------------------------------------------------------------------- the router: modules
def _preference(kernel_type: str, module: nn.Module) -> int:
    """The class name decides which norm is tried first; the first-call check decides (a T5LayerNorm is an RMSNorm)."""
    first = LAYERNORM if LAYERNORM in type(module).__name__.lower() else RMSNORM
    return 0 if kernel_type == first else 1


def last_dim_variants(kernel_type: str, module: nn.Module) -> list[ModuleVariant]:
    """A norm module: a class named like RMSNorm / LayerNorm, a weight (and bias) its only parameters, a float eps."""
    class_name = type(module).__name__.lower()
    if RMSNORM not in class_name and LAYERNORM not in class_name:
        return []
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or weight.dim() == 0 or set(params) - {"weight", "bias"} or any(module.children())
            or module_eps(module) is None):
        return []
    return [ModuleVariant(kernel_type, kernel_type, functools.partial(_read_norm_module, module, kernel_type),
                          rank=(0, 0, _preference(kernel_type, module)))]


def _read_norm_module(module: nn.Module, kernel_type: str, x) -> Reading | str:
    eps = module_eps(module)
    if kernel_type == LAYERNORM:
        return read_norm(kernel_type, x, module.weight, getattr(module, "bias", None),
                         lambda fn, x: launch_layernorm(fn, x, module.weight, module.bias, eps))
    return read_norm(kernel_type, x, module.weight, None, lambda fn, x: launch_rmsnorm(fn, x, module.weight, eps))


def is_inline_norm_module(module: nn.Module) -> bool:
    """A leaf module with a float eps and at most a 1-D weight and bias, as KernelBench writes norms inline."""
    params = dict(module.named_parameters(recurse=False))
    return not (set(params) - {"weight", "bias"} or any(p.dim() != 1 for p in params.values())
                or any(module.children()) or module_eps(module) is None)


def channel_variants(kernel_type: str, module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    """The norm over dim 1 of x (B, C, ...) (x / sqrt(mean(x ** 2, dim=1, keepdim=True) + eps)), where kernels
    of the type were verified at {M, N, I} shapes. Whether the module computes it is decided by the first-call
    check against its own forward."""
    has_bias = "bias" in dict(module.named_parameters(recurse=False))
    if (not is_inline_norm_module(module) or not any("I" in shape for shape in verified_shapes)
            or kernel_type == RMSNORM and has_bias):
        return []
    return [ModuleVariant(kernel_type, f"{kernel_type} dim=1", functools.partial(_read_channel_norm, module,
                                                                                 kernel_type),
                          rank=(0, 1, _preference(kernel_type, module)))]


def norm_param(module: nn.Module, name: str, x: torch.Tensor, size: int, default: float) -> torch.Tensor:
    """The module's weight or bias, or a tensor of `default` (1 for a weight, 0 for a bias) where it has none."""
    param = getattr(module, name, None)
    return param.contiguous() if isinstance(param, torch.Tensor) else torch.full((size,), default, dtype=x.dtype,
                                                                                 device=x.device)


def _read_channel_norm(module: nn.Module, kernel_type: str, x) -> Reading | str:
    params = tuple(p for p in (getattr(module, "weight", None), getattr(module, "bias", None))
                   if isinstance(p, torch.Tensor))
    if x.dim() < 3 or any(p.shape != x.shape[1:2] for p in params):
        return "input is not (B, C, ...) with a weight and bias of C channels"
    shape = {"M": x.shape[0], "N": x.shape[1], "I": math.prod(x.shape[2:])}

    def launch(fn, x):
        n, eps = x.shape[1], float(module_eps(module))
        x3d = x.reshape(x.shape[0], n, math.prod(x.shape[2:])).contiguous()
        weight = norm_param(module, "weight", x, n, 1.0)
        if kernel_type == LAYERNORM:
            return fn(x3d, weight, norm_param(module, "bias", x, n, 0.0), eps, 1).reshape(x.shape)
        return fn(x3d, weight, eps, 1).reshape(x.shape)
    return Reading(shape, (x, *params), launch)
