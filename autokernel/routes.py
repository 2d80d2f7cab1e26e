"""Reads torch calls and modules as kernel calls: the registry shape of each, and how to launch a kernel for it.

A reader looks at one call and returns a Reading, or a string saying why the call cannot run as a
kernel. Reading happens once per input signature (autokernel/router.py caches the decision); what
runs on every later call is the Reading's `launch`, which takes the kernel (or its op) and the
call's own arguments, so a cached decision never holds on to one call's tensors. The shape dict is
built exactly as the profiler builds it, so a call matches the shapes a kernel was verified at.
What is read:
  - functions (FUNCTION_ROUTES): F.linear and (..., K) @ (K, N) matmuls (leading dims flattened
    into M); softmax over the last dim; F.layer_norm; F.rms_norm; SDPA without mask or dropout;
    F.cross_entropy (mean, no weights); sum / mean / amax / amin over any one dim or run of adjacent
    dims (not torch.max / torch.min(x, dim), which return indices too);
  - modules (module_variants): nn.Linear -> matmul; norms (class named like RMSNorm / LayerNorm,
    a 1-D weight, a float eps); RMSNorm / LayerNorm over dim 1 of (B, C, ...), and RMSNorm without
    a weight (a leaf module with a float eps and at most a 1-D weight and bias, KernelBench's
    inline form); gated MLPs (nn.Linear children gate / up / down, or w1 / w3 / w2)
    -> fused_mlp; rotary modules (named like Rotary / RoPE, with (S, D/2) cos and sin tables,
    forward(x)). What a norm, MLP or rotary module computes is inferred from its structure, so the
    router checks its first routed call against the module's own forward.
Kernel arguments are made contiguous: bench.py verified the kernels on contiguous inputs only.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autokernel import registry

# The attribute of an nn.Linear that holds its weight transposed to the (K, N) layout the matmul
# kernels take, with the weight version it was made from; and that of a rotary module that holds
# its cos and sin tables cut to a sequence length and cast to a dtype. Made on eager calls, read
# inside torch.compile as they are, so a compiled graph does not copy them on every forward.
TRANSPOSED_WEIGHT = "_autokernel_weight_t"
ROTARY_TABLES = "_autokernel_rotary_tables"


@dataclass(frozen=True)
class Reading:
    """One call as a kernel takes it: its registry shape, the float inputs (one dtype), and how to launch."""
    shape: dict
    tensors: tuple
    launch: Callable        # function routes: launch(fn, *args, **kwargs); module routes: launch(fn, x)
    per_call_check: Callable | None = None   # a data-dependent condition re-checked on every call; None if none


def _rows(shape) -> dict:
    """(..., N) -> {"M": product of the leading sizes, "N": N}, as the profiler counts rows."""
    return {"M": math.prod(shape[:-1]), "N": shape[-1]}


# --------------------------------------------------------------------------- matmul
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


def _read_linear(input, weight, bias=None):
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or input.dim() == 0:
        return "not a (..., K) input with an (N, K) weight"
    shape = {"M": math.prod(input.shape[:-1]), "N": weight.shape[0], "K": input.shape[-1]}
    return Reading(shape, (input, weight) + ((bias,) if bias is not None else ()), _launch_linear)


def _launch_linear(fn, input, weight, bias=None, owner=None):
    k, n = input.shape[-1], weight.shape[0]
    out = fn(input.reshape(-1, k).contiguous(), transposed_weight(weight, owner)).reshape(*input.shape[:-1], n)
    return out if bias is None else out + bias


def _read_matmul(input, other, *, out=None):
    if out is not None or other.dim() != 2 or input.dim() == 0:
        return "only (..., K) @ (K, N) without out= runs as one 2-D matmul"
    shape = {"M": math.prod(input.shape[:-1]), "N": other.shape[1], "K": input.shape[-1]}
    return Reading(shape, (input, other), _launch_matmul)


def _launch_matmul(fn, input, other, *, out=None):
    k, n = input.shape[-1], other.shape[1]
    return fn(input.reshape(-1, k).contiguous(), other.contiguous()).reshape(*input.shape[:-1], n)


# --------------------------------------------------------------------------- softmax
def _read_softmax(input, dim=None, dtype=None, _stacklevel=3):
    # One signature for torch.softmax(input, dim, dtype), Tensor.softmax and F.softmax (which passes keywords).
    if dtype is not None or input.dim() == 0 or dim not in (-1, input.dim() - 1):
        return "softmax over a dimension other than the last, or with a dtype argument"
    return Reading(_rows(input.shape), (input,), _launch_softmax)


def _launch_softmax(fn, input, dim=None, dtype=None, _stacklevel=3):
    return fn(input.reshape(-1, input.shape[-1]).contiguous()).reshape(input.shape)


# --------------------------------------------------------------------------- norms
def _read_norm(kernel_type: str, x, weight, bias, launch: Callable) -> Reading | str:
    # A norm over the last k dims (LayerNorm((C, H, W))) is a norm over one flattened dim of their
    # product, with the weight and bias flattened the same way.
    trailing = weight.dim() if isinstance(weight, torch.Tensor) else 1
    if weight is None or trailing == 0 or x.dim() < trailing or weight.shape != x.shape[x.dim() - trailing:]:
        return "no weight of the normalized size"
    if kernel_type == "layernorm" and (bias is None or bias.shape != weight.shape):
        return "layernorm kernels take a bias"
    params = (weight, bias) if kernel_type == "layernorm" else (weight,)
    shape = {"M": math.prod(x.shape[:x.dim() - trailing]), "N": weight.numel()}
    return Reading(shape, (x, *params), launch)


def _launch_layernorm(fn, x, weight, bias, eps):
    n = weight.numel()
    return fn(x.reshape(-1, n).contiguous(), weight.reshape(n).contiguous(), bias.reshape(n).contiguous(),
              float(eps)).reshape(x.shape)


def _launch_rmsnorm(fn, x, weight, eps):
    n = weight.numel()
    return fn(x.reshape(-1, n).contiguous(), weight.reshape(n).contiguous(), float(eps)).reshape(x.shape)


def _normalized_weight_matches(normalized_shape, weight) -> bool:
    return weight is not None and tuple(weight.shape) == tuple(normalized_shape)


def _read_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if not _normalized_weight_matches(normalized_shape, weight):
        return "no weight of the normalized size"
    return _read_norm("layernorm", input, weight, bias, _launch_layer_norm)


def _launch_layer_norm(fn, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _launch_layernorm(fn, input, weight, bias, eps)


def _read_rms_norm(input, normalized_shape, weight=None, eps=None):
    if not _normalized_weight_matches(normalized_shape, weight):
        return "no weight of the normalized size"
    return _read_norm("rmsnorm", input, weight, None, _launch_rms_norm)


def _launch_rms_norm(fn, input, normalized_shape, weight=None, eps=None):
    return _launch_rmsnorm(fn, input, weight, torch.finfo(input.dtype).eps if eps is None else eps)


# --------------------------------------------------------------------------- attention
def _read_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                    enable_gqa=False):
    if attn_mask is not None or dropout_p:
        return "attention with a mask or dropout"
    if key.shape != value.shape or query.dim() not in (3, 4) or key.dim() != query.dim():
        return "q, k and v are not (B, H, S, D) tensors with k and v of one shape"
    batch, heads, seq, head_dim = query.shape if query.dim() == 4 else (1, *query.shape)
    kv_heads = key.shape[-3]
    if key.shape[:-3] != query.shape[:-3] or key.shape[-2:] != query.shape[-2:] or heads % kv_heads:
        return "k and v differ from q other than in fewer heads that divide q's (grouped-query attention)"
    if kv_heads != heads and not enable_gqa:
        return "fewer key/value heads than query heads without enable_gqa"
    shape = {"B": batch, "H": heads, **({"KV": kv_heads} if kv_heads != heads else {}), "S": seq, "D": head_dim,
             "causal": int(bool(is_causal))}
    if scale is not None and not math.isclose(scale, 1.0 / math.sqrt(head_dim), rel_tol=1e-6):
        shape["sm_scale"] = scale
    return Reading(shape, (query, key, value), _launch_attention)


def _launch_attention(fn, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False):
    q, k, v = (t.reshape(t.shape if t.dim() == 4 else (1, *t.shape)).contiguous() for t in (query, key, value))
    return fn(q, k, v, bool(is_causal), None if scale is None else float(scale)).reshape(query.shape)


# --------------------------------------------------------------------------- cross-entropy
def _read_cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                        reduction="mean", label_smoothing=0.0):
    if weight is not None or size_average is not None or reduce is not None or reduction != "mean" or label_smoothing:
        return "cross-entropy with class weights, label smoothing or a reduction other than mean"
    if input.dim() != 2 or target.dim() != 1 or target.dtype != torch.int64:
        return "cross-entropy not of (M, V) logits against (M,) class indices"
    return Reading({"M": input.shape[0], "V": input.shape[1]}, (input,), _launch_cross_entropy,
                   per_call_check=_no_ignored_targets)


def _no_ignored_targets(input, target, weight=None, size_average=None, ignore_index=-100, **_):
    # The kernels average over every target: a target equal to ignore_index must go to PyTorch.
    # This reads the targets on every call (a device sync), and cannot be decided inside a compiled graph.
    return None if not bool((target == ignore_index).any()) else "targets equal to ignore_index"


def _launch_cross_entropy(fn, input, target, *args, **kwargs):
    return fn(input.contiguous(), target.contiguous()).to(input.dtype)


# --------------------------------------------------------------------------- reductions
def reduction_layout(shape, dim) -> tuple[int, int, int] | str:
    """(outer, reduced, inner) of a reduction over `dim` of a tensor of this shape, the (O, R, I)
    layout the reduce kernel is judged on, or why it is not one.

    Any one dimension, or a run of adjacent ones (all of them when dim is None or ()), is one
    reduced axis of the tensor viewed as (O, R, I); dims with a gap between them are not. The
    profiler's plan (classify.py) asks this too, so a reduction is planned as a job only in a form
    the router can run.
    """
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if len(shape) == 0 or not all(isinstance(d, int) for d in dims):
        return "a reduction of a 0-d tensor, or over named dimensions"
    ndim = len(shape)
    if not all(-ndim <= d < ndim for d in dims):
        return "a reduction over a dimension out of range"
    reduced = sorted({d % ndim for d in dims}) or list(range(ndim))
    first, last = reduced[0], reduced[-1]
    if reduced != list(range(first, last + 1)):
        return "a reduction over dimensions that are not adjacent"
    return math.prod(shape[:first]), math.prod(shape[first:last + 1]), math.prod(shape[last + 1:])


def _reduced_dims(input, dim) -> list[int]:
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % input.dim() for d in dims}) or list(range(input.dim()))


def _read_reduction(op: str, input, dim=None, keepdim=False, *, dtype=None, out=None) -> Reading | str:
    # The signature of torch.sum / torch.mean and their Tensor methods; amax's and amin's have no
    # dtype, and their dim=() also means all dims.
    if dtype is not None or out is not None:
        return "a reduction with a dtype or out argument"
    layout = reduction_layout(tuple(input.shape), dim)
    if isinstance(layout, str):
        return layout
    return Reading(registry.reduce_shape(*layout, op), (input,), functools.partial(_launch_reduction, op))


def _launch_reduction(op: str, fn, input, dim=None, keepdim=False, *, dtype=None, out=None):
    sizes, kernel_dim = registry.reduce_call(*reduction_layout(tuple(input.shape), dim))
    reduced = _reduced_dims(input, dim)
    out_shape = [1 if d in reduced else size for d, size in enumerate(input.shape) if keepdim or d not in reduced]
    return fn(input.reshape(sizes).contiguous(), kernel_dim, op).reshape(out_shape)


@dataclass(frozen=True)
class FunctionRoute:
    """A torch function some kernel type can run: how to read a call of it."""
    kernel_type: str
    read: Callable


_SUM, _MEAN = functools.partial(_read_reduction, "sum"), functools.partial(_read_reduction, "mean")
_MAX, _MIN = functools.partial(_read_reduction, "max"), functools.partial(_read_reduction, "min")
# torch function -> how to read a call of it
FUNCTION_ROUTES: dict[Callable, FunctionRoute] = {
    F.linear: FunctionRoute("matmul", _read_linear),
    torch.matmul: FunctionRoute("matmul", _read_matmul), torch.Tensor.matmul: FunctionRoute("matmul", _read_matmul),
    torch.mm: FunctionRoute("matmul", _read_matmul), torch.Tensor.mm: FunctionRoute("matmul", _read_matmul),
    torch.softmax: FunctionRoute("softmax", _read_softmax),
    torch.Tensor.softmax: FunctionRoute("softmax", _read_softmax),
    F.softmax: FunctionRoute("softmax", _read_softmax),
    F.layer_norm: FunctionRoute("layernorm", _read_layer_norm),
    F.rms_norm: FunctionRoute("rmsnorm", _read_rms_norm),
    F.scaled_dot_product_attention: FunctionRoute("flash_attention", _read_attention),
    F.cross_entropy: FunctionRoute("cross_entropy", _read_cross_entropy),
    torch.sum: FunctionRoute("reduce", _SUM), torch.Tensor.sum: FunctionRoute("reduce", _SUM),
    torch.mean: FunctionRoute("reduce", _MEAN), torch.Tensor.mean: FunctionRoute("reduce", _MEAN),
    torch.amax: FunctionRoute("reduce", _MAX), torch.Tensor.amax: FunctionRoute("reduce", _MAX),
    torch.amin: FunctionRoute("reduce", _MIN), torch.Tensor.amin: FunctionRoute("reduce", _MIN),
    # torch.max / torch.min(x, dim) are not routed: they return indices too, and the reduce kernels
    # compute values only (classify.py leaves aten::max / aten::min unplanned for the same reason).
}


def function_name(func: Callable) -> str:
    """A routed torch function as a user writes it: torch.nn.functional.softmax, torch.Tensor.sum, torch.matmul."""
    name = getattr(func, "__name__", None)
    for prefix, namespace in (("torch.nn.functional", F), ("torch.Tensor", torch.Tensor), ("torch", torch)):
        if name and getattr(namespace, name, None) is func:
            return f"{prefix}.{name}"
    return repr(func)


def read_function_call(func: Callable, args: tuple, kwargs: dict) -> tuple[str, Reading | str]:
    """(kernel type, the Reading of this call or why it cannot run as a kernel) for a routed torch function."""
    route = FUNCTION_ROUTES[func]
    try:
        reading = route.read(*args, **kwargs)
    except TypeError:
        return route.kernel_type, "a calling form the route does not read"
    return route.kernel_type, reading


# --------------------------------------------------------------------------- modules a kernel replaces
@dataclass(frozen=True)
class ModuleVariant:
    """One way a module could run as a kernel: the type, whether its first call must be checked, and its reader."""
    kernel_type: str
    label: str
    read: Callable[[torch.Tensor], Reading | str]
    needs_check: bool = True     # inferred from the module's structure, so checked against its own forward once


def _linear_variants(module: nn.Module) -> list[ModuleVariant]:
    if type(module) is not nn.Linear:      # a subclass may compute something else (quantized, LoRA...)
        return []

    def read(x):
        reading = _read_linear(x, module.weight, module.bias)
        if isinstance(reading, str):
            return reading
        return Reading(reading.shape, reading.tensors,
                       lambda fn, x: _launch_linear(fn, x, module.weight, module.bias, owner=module))
    return [ModuleVariant("matmul", "matmul", read, needs_check=False)]


def module_eps(module: nn.Module) -> float | None:
    """The module's float eps (eps or variance_epsilon), or None: what a norm module must carry to be read as one."""
    return next((value for value in (getattr(module, name, None) for name in ("eps", "variance_epsilon"))
                 if isinstance(value, float)), None)


def _norm_variants(module: nn.Module, loaded: set[str]) -> list[ModuleVariant]:
    class_name = type(module).__name__.lower()
    if "rmsnorm" not in class_name and "layernorm" not in class_name:
        return []
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or weight.dim() == 0 or set(params) - {"weight", "bias"} or any(module.children())
            or module_eps(module) is None):
        return []
    # The class name decides the order; the first-call check decides (a T5LayerNorm is an RMSNorm).
    order = ("layernorm", "rmsnorm") if "layernorm" in class_name else ("rmsnorm", "layernorm")
    return [ModuleVariant(kind, kind, functools.partial(_read_norm_module, module, kind)) for kind in order
            if kind in loaded]


def _read_norm_module(module: nn.Module, kernel_type: str, x) -> Reading | str:
    eps = module_eps(module)
    if kernel_type == "layernorm":
        return _read_norm(kernel_type, x, module.weight, getattr(module, "bias", None),
                          lambda fn, x: _launch_layernorm(fn, x, module.weight, module.bias, eps))
    return _read_norm(kernel_type, x, module.weight, None, lambda fn, x: _launch_rmsnorm(fn, x, module.weight, eps))



def _channel_norm_variants(module: nn.Module, verified_shapes: dict[str, list[dict]]) -> list[ModuleVariant]:
    """Norms of a leaf module with a float eps and at most a 1-D weight and bias, as KernelBench
    writes them inline (x / sqrt(mean(x ** 2, dim=1, keepdim=True) + eps)): RMSNorm or LayerNorm
    over dim 1 of x (B, C, ...), where kernels of the type were verified at {M, N, I} shapes; and
    RMSNorm over the last dim (with a weight of ones) when the module has no parameters. Which one,
    if any, is what the module computes is decided by the first-call check against its own forward."""
    params = dict(module.named_parameters(recurse=False))
    if (set(params) - {"weight", "bias"} or any(p.dim() != 1 for p in params.values()) or any(module.children())
            or module_eps(module) is None):
        return []
    kinds = ("layernorm", "rmsnorm") if "layernorm" in type(module).__name__.lower() else ("rmsnorm", "layernorm")
    variants = [ModuleVariant(kind, f"{kind} dim=1", functools.partial(_read_channel_norm, module, kind))
                for kind in kinds if any("I" in shape for shape in verified_shapes.get(kind, []))
                and (kind == "layernorm" or "bias" not in params)]
    if not params and "rmsnorm" in verified_shapes:
        variants.append(ModuleVariant("rmsnorm", "rmsnorm (no weight)",
                                      functools.partial(_read_weightless_last_dim_norm, module)))
    return variants


def _norm_param(module: nn.Module, name: str, x: torch.Tensor, size: int, default: float) -> torch.Tensor:
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
        weight = _norm_param(module, "weight", x, n, 1.0)
        if kernel_type == "layernorm":
            return fn(x3d, weight, _norm_param(module, "bias", x, n, 0.0), eps, 1).reshape(x.shape)
        return fn(x3d, weight, eps, 1).reshape(x.shape)
    return Reading(shape, (x, *params), launch)


def _read_weightless_last_dim_norm(module: nn.Module, x) -> Reading | str:
    if x.dim() == 0:
        return "a 0-d input"
    return Reading(_rows(x.shape), (x,), lambda fn, x: _launch_rmsnorm(
        fn, x, _norm_param(module, "weight", x, x.shape[-1], 1.0), module_eps(module)))


_MLP_ROLES = {"gate": ("gate", "w1"), "up": ("up", "w3"), "down": ("down", "w2")}


def mlp_linears(module: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear] | None:
    """(gate, up, down) of a gated MLP: bias-free nn.Linear children named gate / up / down (or w1 / w3 / w2),
    gate and up (F, D) and down (D, F); None for any other module."""
    linears = {}
    for role, hints in _MLP_ROLES.items():
        found = [child for name, child in module.named_children()
                 if isinstance(child, nn.Linear) and child.bias is None and (name == hints[1] or hints[0] in name)]
        if len(found) != 1:
            return None
        linears[role] = found[0]
    gate, up, down = linears["gate"], linears["up"], linears["down"]
    if not (gate.weight.shape == up.weight.shape == down.weight.t().shape):
        return None
    return gate, up, down


def _mlp_variants(module: nn.Module, acts: list[str]) -> list[ModuleVariant]:
    linears = mlp_linears(module)
    if linears is None:
        return []
    gate, up, down = linears
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


def _rotary_variants(module: nn.Module) -> list[ModuleVariant]:
    buffers = dict(module.named_buffers(recurse=False))
    cos, sin = buffers.get("cos"), buffers.get("sin")
    if (not re.search(r"rotary|rope", type(module).__name__, re.IGNORECASE) or cos is None or sin is None
            or cos.dim() != 2 or cos.shape != sin.shape):
        return []
    return [ModuleVariant("rotary_embedding", "rotary_embedding", functools.partial(_read_rotary, module))]


def _read_rotary(module: nn.Module, x) -> Reading | str:
    cos = module.cos
    if x.dim() != 4 or x.shape[-1] != 2 * cos.shape[-1] or x.shape[-2] > cos.shape[0]:
        return "input is not (B, H, S, D) with D twice the table width and S within the tables"
    batch, heads, seq, head_dim = x.shape

    def launch(fn, x):
        cos, sin = rotary_tables(module, x.shape[-2], x.dtype)
        return fn(x.contiguous(), cos, sin)
    return Reading({"B": batch, "H": heads, "S": seq, "D": head_dim}, (x,), launch)


def rotary_tables(module: nn.Module, seq: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's cos and sin tables for `seq` positions in `dtype`, contiguous, kept on the module."""
    if torch.compiler.is_compiling():      # the tables an eager call kept (a version is no graph constant)
        kept = module.__dict__.get(ROTARY_TABLES)
        if kept is not None and kept[0] == (dtype, seq):
            return kept[2]
        return module.cos[:seq].to(dtype).contiguous(), module.sin[:seq].to(dtype).contiguous()
    versions = (module.cos._version, module.sin._version)
    kept = module.__dict__.get(ROTARY_TABLES)
    if kept is None or kept[0] != (dtype, seq) or kept[1] != versions:
        kept = ((dtype, seq), versions, (module.cos[:seq].to(dtype).contiguous(),
                                         module.sin[:seq].to(dtype).contiguous()))
        module.__dict__[ROTARY_TABLES] = kept
    return kept[2]


def module_variants(module: nn.Module, verified_shapes: dict[str, list[dict]]) -> list[ModuleVariant]:
    """The ways this module could run as one of the loaded kernel types (type -> the shapes verified), in order."""
    loaded = set(verified_shapes)
    acts = list(dict.fromkeys(shape["act"] for shape in verified_shapes.get("fused_mlp", []) if "act" in shape))
    return ((_linear_variants(module) if "matmul" in loaded else [])
            + _norm_variants(module, loaded)
            + _channel_norm_variants(module, verified_shapes)
            + (_mlp_variants(module, acts) if "fused_mlp" in loaded else [])
            + (_rotary_variants(module) if "rotary_embedding" in loaded else []))


def forget_kept_tensors(model: nn.Module) -> None:
    """Drop the transposed weights and rotary tables kept on the model's modules (plugin.unplug)."""
    for module in model.modules():
        module.__dict__.pop(TRANSPOSED_WEIGHT, None)
        module.__dict__.pop(ROTARY_TABLES, None)
