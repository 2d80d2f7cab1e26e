"""Reads torch calls and modules as kernel calls: the registry shape dict and the kernel's arguments of each.

A reader returns a Call, or a string saying why the call cannot run as a kernel. The shape dict is
built exactly as the profiler builds it, so a call matches the shapes a kernel was verified at.
What is read:
  - functions (FUNCTION_ROUTES): F.linear and (..., K) @ (K, N) matmuls (leading dims flattened
    into M); softmax over the last dim; F.layer_norm; F.rms_norm; SDPA without mask or dropout;
    F.cross_entropy (mean, no weights); sum / amax over leading or trailing dims;
  - modules (module_variants): norms (class named like RMSNorm / LayerNorm, a 1-D weight, a float
    eps); gated MLPs (nn.Linear children gate / up / down, or w1 / w3 / w2) -> fused_mlp; rotary
    modules (named like Rotary / RoPE, with (S, D/2) cos and sin tables, forward(x)). What such a
    module computes is inferred from its structure, so plugin.py checks its first routed call.
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
from torch.utils.weak import WeakIdKeyDictionary


# --------------------------------------------------------------------------- torch function calls
@dataclass
class Call:
    """One call as a kernel would take it: its registry shape and how to run it."""
    shape: dict
    tensors: tuple                                   # the float inputs, which must share one dtype
    kernel_args: Callable[[], tuple]                 # built only when the kernel runs (copies cost)
    finish: Callable[[torch.Tensor], torch.Tensor] = lambda out: out   # back to the caller's shapes


def _rows(shape) -> dict:
    """(..., N) -> {"M": product of the leading sizes, "N": N}, as the profiler counts rows."""
    return {"M": math.prod(shape[:-1]), "N": shape[-1]}


_TRANSPOSED_WEIGHTS = WeakIdKeyDictionary()


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    """weight.T as a contiguous (K, N) matrix: made once per parameter, again only after it changes."""
    if torch.compiler.is_compiling() or not isinstance(weight, nn.Parameter):
        return weight.t().contiguous()
    cached = _TRANSPOSED_WEIGHTS.get(weight)
    if cached is None or cached[0] != weight._version:
        cached = _TRANSPOSED_WEIGHTS[weight] = (weight._version, weight.t().contiguous())
    return cached[1]


def _linear(input, weight, bias=None):
    if weight.dim() != 2 or input.dim() == 0:
        return "not a (..., K) input with an (N, K) weight"
    k, n = input.shape[-1], weight.shape[0]
    shape = {"M": math.prod(input.shape[:-1]), "N": n, "K": k}

    def finish(out):
        out = out.reshape(*input.shape[:-1], n)
        return out if bias is None else out + bias
    return Call(shape, (input, weight) + ((bias,) if bias is not None else ()),
                lambda: (input.reshape(shape["M"], k).contiguous(), _transposed(weight)), finish)


def _matmul(input, other, *, out=None):
    if out is not None or other.dim() != 2 or input.dim() == 0:
        return "only (..., K) @ (K, N) without out= runs as one 2-D matmul"
    k, n = input.shape[-1], other.shape[1]
    shape = {"M": math.prod(input.shape[:-1]), "N": n, "K": k}
    return Call(shape, (input, other), lambda: (input.reshape(shape["M"], k).contiguous(), other.contiguous()),
                lambda result: result.reshape(*input.shape[:-1], n))


def _softmax(input, dim=None, dtype=None, _stacklevel=3):
    # One signature for torch.softmax(input, dim, dtype), Tensor.softmax and F.softmax (which passes keywords).
    if dtype is not None or input.dim() == 0 or dim not in (-1, input.dim() - 1):
        return "softmax over a dimension other than the last, or with a dtype argument"
    shape = _rows(input.shape)
    return Call(shape, (input,), lambda: (input.reshape(shape["M"], shape["N"]).contiguous(),),
                lambda out: out.reshape(input.shape))


def _norm_call(kernel_type: str, x, weight, bias, eps) -> Call | str:
    n = x.shape[-1] if x.dim() else 0
    if weight is None or weight.shape != (n,):
        return "no weight of the normalized size"
    if kernel_type == "layernorm" and (bias is None or bias.shape != (n,)):
        return "layernorm kernels take a bias"
    shape = _rows(x.shape)
    params = (weight, bias) if kernel_type == "layernorm" else (weight,)
    return Call(shape, (x, *params),
                lambda: (x.reshape(shape["M"], n).contiguous(), *(p.contiguous() for p in params), float(eps)),
                lambda out: out.reshape(x.shape))


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if len(normalized_shape) != 1:
        return "normalized over more than the last dimension"
    return _norm_call("layernorm", input, weight, bias, eps)


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    if len(normalized_shape) != 1:
        return "normalized over more than the last dimension"
    return _norm_call("rmsnorm", input, weight, None, torch.finfo(input.dtype).eps if eps is None else eps)


def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None or dropout_p:
        return "attention with a mask or dropout"
    if not query.shape == key.shape == value.shape or query.dim() not in (3, 4):
        return "q, k and v are not of one (B, H, S, D) shape"
    batch, heads, seq, head_dim = query.shape if query.dim() == 4 else (1, *query.shape)
    shape = {"B": batch, "H": heads, "S": seq, "D": head_dim, "causal": int(bool(is_causal))}
    if scale is not None and not math.isclose(scale, 1.0 / math.sqrt(head_dim), rel_tol=1e-6):
        shape["sm_scale"] = scale

    def kernel_args():
        q, k, v = (t.reshape(batch, heads, seq, head_dim).contiguous() for t in (query, key, value))
        return q, k, v, bool(is_causal), None if scale is None else float(scale)
    return Call(shape, (query, key, value), kernel_args, lambda out: out.reshape(query.shape))


def _cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                   reduction="mean", label_smoothing=0.0):
    if weight is not None or size_average is not None or reduce is not None or reduction != "mean" or label_smoothing:
        return "cross-entropy with class weights, label smoothing or a reduction other than mean"
    if input.dim() != 2 or target.dim() != 1 or target.dtype != torch.int64:
        return "cross-entropy not of (M, V) logits against (M,) class indices"
    if bool((target == ignore_index).any()):
        return "targets equal to ignore_index"
    return Call({"M": input.shape[0], "V": input.shape[1]}, (input,),
                lambda: (input.contiguous(), target.contiguous()), lambda out: out.to(input.dtype))


def _reduction(op: str, input, dim=None, keepdim=False, *, dtype=None) -> Call | str:
    # The signature of torch.sum and Tensor.sum; amax's has no dtype, and its dim=() also means all dims.
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if dtype is not None or input.dim() == 0 or not all(isinstance(d, int) for d in dims):
        return "a reduction with a dtype argument, of a 0-d tensor, or over named dimensions"
    ndim, numel = input.dim(), input.numel()
    reduced = sorted(d % ndim for d in dims) or list(range(ndim))
    count, size = len(reduced), math.prod(input.shape[d] for d in reduced)
    if reduced == list(range(ndim - count, ndim)):
        rows, cols, kernel_dim = numel // max(size, 1), size, -1
        out_shape = (*input.shape[:ndim - count], *(1,) * count * keepdim)
    elif reduced == list(range(count)):
        rows, cols, kernel_dim = size, numel // max(size, 1), 0
        out_shape = (*(1,) * count * keepdim, *input.shape[count:])
    else:
        return "a reduction over dimensions that are neither leading nor trailing"
    shape = {"M": rows, "N": cols, "dim": kernel_dim, "op": op}
    return Call(shape, (input,), lambda: (input.reshape(rows, cols).contiguous(), kernel_dim, op),
                lambda out: out.reshape(out_shape))


# torch function -> (kernel type, how to read a call of it)
FUNCTION_ROUTES = {
    F.linear: ("matmul", _linear),
    torch.matmul: ("matmul", _matmul), torch.Tensor.matmul: ("matmul", _matmul),
    torch.mm: ("matmul", _matmul), torch.Tensor.mm: ("matmul", _matmul),
    torch.softmax: ("softmax", _softmax), torch.Tensor.softmax: ("softmax", _softmax), F.softmax: ("softmax", _softmax),
    F.layer_norm: ("layernorm", _layer_norm),
    F.rms_norm: ("rmsnorm", _rms_norm),
    F.scaled_dot_product_attention: ("flash_attention", _attention),
    F.cross_entropy: ("cross_entropy", _cross_entropy),
    torch.sum: ("reduce", functools.partial(_reduction, "sum")),
    torch.Tensor.sum: ("reduce", functools.partial(_reduction, "sum")),
    torch.amax: ("reduce", functools.partial(_reduction, "max")),
    torch.Tensor.amax: ("reduce", functools.partial(_reduction, "max")),
}



# --------------------------------------------------------------------------- modules a kernel replaces
@dataclass
class ModuleVariant:
    """One way a module could run as a kernel: the type and how to read a call."""
    kernel_type: str
    label: str
    make_call: Callable[[torch.Tensor], Call | str]


def _module_eps(module: nn.Module):
    return next((value for value in (getattr(module, name, None) for name in ("eps", "variance_epsilon"))
                 if isinstance(value, float)), None)


def _norm_variants(module: nn.Module, loaded: set[str]) -> list[ModuleVariant]:
    class_name = type(module).__name__.lower()
    if "rmsnorm" not in class_name and "layernorm" not in class_name:
        return []
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or weight.dim() != 1 or set(params) - {"weight", "bias"} or any(module.children())
            or _module_eps(module) is None):
        return []
    # The class name decides the order; the first-call check decides (a T5LayerNorm is an RMSNorm).
    order = ("layernorm", "rmsnorm") if "layernorm" in class_name else ("rmsnorm", "layernorm")
    return [ModuleVariant(kind, kind, functools.partial(_norm_module_call, module, kind)) for kind in order
            if kind in loaded]


def _norm_module_call(module: nn.Module, kernel_type: str, x) -> Call | str:
    return _norm_call(kernel_type, x, module.weight, getattr(module, "bias", None), _module_eps(module))


_MLP_ROLES = {"gate": ("gate", "w1"), "up": ("up", "w3"), "down": ("down", "w2")}


def _mlp_variants(module: nn.Module, acts: list[str]) -> list[ModuleVariant]:
    linears = {}
    for role, hints in _MLP_ROLES.items():
        found = [child for name, child in module.named_children()
                 if isinstance(child, nn.Linear) and child.bias is None and (name == hints[1] or hints[0] in name)]
        if len(found) != 1:
            return []
        linears[role] = found[0]
    gate, up, down = linears["gate"], linears["up"], linears["down"]
    if not (gate.weight.shape == up.weight.shape == down.weight.t().shape):
        return []
    return [ModuleVariant("fused_mlp", f"fused_mlp act={act}",
                          functools.partial(_mlp_call, gate=gate, up=up, down=down, act=act)) for act in acts]


def _mlp_call(x, gate: nn.Linear, up: nn.Linear, down: nn.Linear, act: str) -> Call | str:
    hidden, dim = gate.weight.shape
    if x.dim() == 0 or x.shape[-1] != dim:
        return "input size differs from the MLP's"
    rows = math.prod(x.shape[:-1])
    weights = (gate.weight, up.weight, down.weight)
    return Call({"M": rows, "D": dim, "F": hidden, "act": act}, (x, *weights),
                lambda: (x.reshape(rows, dim).contiguous(), *(w.contiguous() for w in weights), act),
                lambda out: out.reshape(*x.shape[:-1], dim))


def _rotary_variants(module: nn.Module) -> list[ModuleVariant]:
    buffers = dict(module.named_buffers(recurse=False))
    cos, sin = buffers.get("cos"), buffers.get("sin")
    if (not re.search(r"rotary|rope", type(module).__name__, re.IGNORECASE) or cos is None or sin is None
            or cos.dim() != 2 or cos.shape != sin.shape):
        return []
    return [ModuleVariant("rotary_embedding", "rotary_embedding", lambda x: _rotary_call(x, module.cos, module.sin))]


def _rotary_call(x, cos, sin) -> Call | str:
    if x.dim() != 4 or x.shape[-1] != 2 * cos.shape[-1] or x.shape[-2] > cos.shape[0]:
        return "input is not (B, H, S, D) with D twice the table width and S within the tables"
    batch, heads, seq, head_dim = x.shape
    return Call({"B": batch, "H": heads, "S": seq, "D": head_dim}, (x,),
                lambda: (x.contiguous(), cos[:seq].to(x.dtype).contiguous(), sin[:seq].to(x.dtype).contiguous()))


def module_variants(module: nn.Module, verified_shapes: dict[str, list[dict]]) -> list[ModuleVariant]:
    """The ways this module could run as one of the loaded kernel types (type -> the shapes verified), in order."""
    loaded = set(verified_shapes)
    acts = list(dict.fromkeys(shape["act"] for shape in verified_shapes.get("fused_mlp", []) if "act" in shape))
    return (_norm_variants(module, loaded)
            + (_mlp_variants(module, acts) if "fused_mlp" in loaded else [])
            + (_rotary_variants(module) if "rotary_embedding" in loaded else []))


def forget_transposed_weights() -> None:
    """Drop the cached transposed weights (plugin.unplug: the model may be changed or freed next)."""
    _TRANSPOSED_WEIGHTS.clear()
