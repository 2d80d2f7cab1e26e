"""Attributes the ops of a profiler trace to the registry kernel types (or "other"), each with its registry shape.

A root op is an op not called by another op (aten::linear, not the aten::addmm inside it); all the
time under it counts once, for it. Every module call is marked in the trace by a range
`autokernel::<module path>#<input shape>` (autokernel/profiler.py sets them), and each root op then
belongs to:
  1. the innermost enclosing module that is one kernel of its own, found by structure:
     - a norm: a leaf module whose only parameters are a 1-D weight (and bias) -> rmsnorm when it
       runs rsqrt / sqrt / rms_norm without subtracting a mean, layernorm when it subtracts the mean
       (class names containing RMSNorm / LayerNorm decide ties); shape {M, N} from its input, or
       {M, N, I} for a norm whose means are over dim 1 of (B, C, ...); also rmsnorm: a leaf module
       with a float eps, no weight (or a 1-D one), whose ops are only an RMSNorm's (KernelBench's
       inline form);
     - a gated MLP: direct nn.Linear children gate and up (D -> F, or one fused D -> 2F) and
       down (F -> D), running silu, gelu or relu -> fused_mlp {M, D, F, act}. Its linears count
       as fused_mlp, not matmul, because one fused_mlp kernel replaces all of them, so Amdahl's
       law must see their combined time. Ungated MLPs (GPT-2, BERT) stay matmul plus "other";
     - a module named like Rotary / RoPE that runs no matmul -> rotary_embedding, from its input;
  2. else, a Python function on the call stack named like rotary / rotate / rope (rotate_half)
     -> rotary_embedding, together with the products with cos / sin and their sum written inline
     beside it in the same module call; one entry per module call site, {B, H, S, D} from the
     largest 4-D tensor it touched (the (B, H, S, D) layout that SDPA uses is assumed);
  3. else, the op's own name (aten::addmm -> matmul, aten::_softmax -> softmax, ...), shape from
     its recorded input shapes; anything else is "other".
Before all of these, a norm folded into its consumers (`folds`, found by autokernel/norm_folding.py
on a real forward: its output goes only to those modules) counts with them as one fused type, and
the norm's ops join the first consumer's site, since the fused kernels replace the norm and the
consumers together:
  - into a gated MLP (the router's kind, fold_routing.is_gated_mlp_module): rmsnorm_mlp {M, D, F, act},
    the MLP's own ops included, where the trace's activation is the one the router will read
    (fold_routing.mlp_activation); otherwise the pair stays rmsnorm + fused_mlp;
  - into nn.Linear modules: rmsnorm_linear, each consumer linear a site {M, N, K} of its own.
A norm two types could fold goes to the first in FOLD_SHAPES' order (the MLP whole before its linears).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn
from torch.autograd import DeviceType

from autokernel import fold_routing, registry, routes

OTHER = "other"
RANGE_PREFIX = "autokernel::"
FUNCTION_RANGE_PREFIX = "autokernel.fn: "     # "<prefix><name>": its tail after ": " is the function's name

# Which type an op's own name makes it: each registry entry lists its ops (KernelType.profiled_ops).
_OP_KERNEL_TYPES = {op: kt.name for kt in registry.REGISTRY.values() for op in kt.profiled_ops}
_REDUCE_OPS = {"aten::sum": "sum", "aten::mean": "mean", "aten::amax": "max", "aten::amin": "min"}
_LOG_SOFTMAX_OPS = {"aten::log_softmax", "aten::_log_softmax"}
_MATMUL_OPS = {op for op, kind in _OP_KERNEL_TYPES.items() if kind == "matmul"}
_LAYERNORM_OPS = registry.get("layernorm").profiled_ops
_RMSNORM_OPS = registry.get("rmsnorm").profiled_ops
_ROOT_MEAN_SQUARE_OPS = {"aten::rsqrt", "aten::sqrt", "aten::norm", "aten::linalg_vector_norm"}
_MEAN_SUBTRACTION_OPS = {"aten::sub", "aten::var", "aten::var_mean"}
# Activation op -> fused_mlp "act" value; relu is taken as the squared-ReLU ("relu2") MLP.
_ACTIVATIONS = {"aten::silu": "silu", "aten::gelu": "gelu", "aten::relu": "relu2"}
FOLD_POLICY = ("an RMSNorm whose output only a gated MLP reads counts with it as rmsnorm_mlp; one whose output "
               "only nn.Linear layers read counts with them as rmsnorm_linear, one shape per linear, the norm's "
               "time with the first linear")
MLP_POLICY = ("gated MLP modules (gate/up/down linears + activation) count as fused_mlp, not matmul; "
              "ungated MLP linears count as matmul and their activation as other")


@dataclass
class ModuleCall:
    """One call of a module, read from its range in the trace."""
    path: str
    input_shape: tuple[int, ...]
    call_id: int


@dataclass
class RootOp:
    """An op not called by another op, with everything the attribution needs about where it ran."""
    event: object                    # the torch FunctionEvent
    name: str
    module_calls: list[ModuleCall]   # innermost first
    rotary_call_id: int | None       # the outermost enclosing rotary-named Python function call
    time_us: float = 0.0
    # What attribution decided: a kernel type with its registry shape, or OTHER with none.
    kernel_type: str = OTHER
    shape: dict | None = None


@dataclass
class SiteOps:
    """The root ops of one call site (a module path) in one kernel type at one shape, over the whole trace."""
    kernel_type: str
    module_path: str
    shape: dict
    calls: int                       # distinct calls: module calls, rotary function calls or ops
    roots: list[RootOp]


@dataclass
class Attribution:
    """A classified trace: its root ops, their call sites and the time measured."""
    roots: list[RootOp]              # every root op, its kernel_type and shape set
    sites: list[SiteOps]             # the call sites of a registry kernel type, in trace order
    measured_us: float               # all measured time in the trace


def attribute(events, model: nn.Module, on_gpu: bool, folds: dict | None = None) -> Attribution:
    """Classify the root ops of a trace of `model` (torch.profiler events) and group them by call site.

    folds: kernel type -> the FoldSearch of autokernel/norm_folding.py for it (profiler.find_folds)."""
    roots, measured_us = _collect_root_ops(events, on_gpu)
    fused = _fused_modules(model, roots)
    groups, call_ids = _group_call_sites(roots, fused, _folded_paths(folds or {}, fused))
    sites = []
    for key, members in groups.items():
        kernel_type, path, source, detail = key
        if source == "module":
            shape = _module_shape(fused[path], detail, members)
        elif source == "function":
            shape = _bhsd(_largest_head_tensor(members))
        else:
            shape = json.loads(detail)
        for root in members:
            root.kernel_type, root.shape = (kernel_type if shape else OTHER), shape
        if shape and kernel_type != OTHER:
            sites.append(SiteOps(kernel_type, path, shape, len(call_ids[key]), members))
    return Attribution(roots, sites, measured_us)


# --------------------------------------------------------------------------- reading the trace
def _module_call(event) -> ModuleCall:
    path, _, shape = event.name[len(RANGE_PREFIX):].rpartition("#")
    return ModuleCall(path, tuple(int(size) for size in shape.split(",") if size), id(event))


def _is_python_function(event) -> bool:
    # torch 2.12 put the Python frames that with_stack records into the event list, flagged so;
    # older releases (the GPU image's 2.11) leave them out and have no flag. The profiler also puts
    # a range around each call of a rotary-named function of the model's own modules
    # (FUNCTION_RANGE_PREFIX), which stands for its frame on every release.
    return getattr(event, "is_python_function", False) or event.name.startswith(FUNCTION_RANGE_PREFIX)


def _collect_root_ops(events, on_gpu: bool) -> tuple[list[RootOp], float]:
    """Root ops with all the time under them, and the total measured time, in microseconds."""
    roots: dict[int, RootOp] = {}
    measured_us = 0.0
    for event in events:
        if event.device_type != DeviceType.CPU:
            # Device-side events: kernels and memcpys count toward the measured total; GPU copies
            # of the module ranges (user annotations) span other kernels and would count twice.
            if not getattr(event, "is_user_annotation", False) and not event.name.startswith(RANGE_PREFIX):
                measured_us += event.device_time_total
            continue
        if event.is_async or _is_python_function(event):
            continue
        is_range = event.name.startswith(RANGE_PREFIX)
        # Without a GPU, a range's own time is the Python between its ops, not op time.
        if is_range and not on_gpu:
            continue
        self_us = event.self_device_time_total if on_gpu else event.self_cpu_time_total
        if self_us <= 0:
            continue
        if not on_gpu:
            measured_us += self_us
        # Up to the innermost module range: the ops (the outermost is the root) and Python functions.
        root_event, rotary_call, node = None, None, event
        while node is not None and not node.name.startswith(RANGE_PREFIX):
            if not _is_python_function(node):
                root_event = node
            elif is_rotary_name(node.name.rsplit(": ", 1)[-1]):
                rotary_call = id(node)
            node = node.cpu_parent
        calls = []
        while node is not None:
            if node.name.startswith(RANGE_PREFIX):
                calls.append(_module_call(node))
            node = node.cpu_parent
        # On a GPU, kernels launched straight from Python (Triton) hang on a module range.
        root_event = root_event or event
        root = roots.get(id(root_event))
        if root is None:
            name = root_event.name
            if name.startswith(RANGE_PREFIX) and root_event.kernels:
                name = f"kernel {root_event.kernels[0].name}"
            root = roots[id(root_event)] = RootOp(root_event, name, calls, rotary_call)
        root.time_us += self_us
    return list(roots.values()), measured_us


def is_rotary_name(name: str) -> bool:
    return bool(re.search(r"rotary|rotate|(?:^|_)rope(?:_|$)", name.lower()) or re.search(r"Ro[Pp][Ee](?![a-z])", name))


@lru_cache(maxsize=None)
def _argument_index(op: str, n_args: int, argument: str) -> int | None:
    for schema in torch._C._jit_get_schemas_for_operator(op):
        names = [arg.name for arg in schema.arguments]
        if len(names) == n_args and argument in names:
            return names.index(argument)
    return None


def _argument(event, argument: str):
    """The recorded value of a scalar argument of an aten op, or None when it was not recorded."""
    values = event.concrete_inputs or []
    index = _argument_index(event.name, len(values), argument)
    return values[index] if index is not None else None


# --------------------------------------------------------------------------- modules that are one kernel
@dataclass
class _FusedModule:
    kernel_type: str
    module: nn.Module
    activation: str | None = None
    mean_dims: list | None = None       # a norm's: the dim arguments of the means it takes


def _fused_modules(model: nn.Module, roots: list[RootOp]) -> dict[str, _FusedModule]:
    """The module paths whose whole call is one kernel of a registry type."""
    ops_under: dict[str, set[str]] = defaultdict(set)
    mean_dims: dict[str, list] = defaultdict(list)
    for root in roots:
        for call in root.module_calls:
            ops_under[call.path].add(root.name)
            if root.name == "aten::mean":
                mean_dims[call.path].append(_argument(root.event, "dim"))
    modules = dict(model.named_modules())
    kinds = {path: _fused_kind(modules[path], ops) for path, ops in ops_under.items()}
    for path, kind in kinds.items():
        if kind is not None and kind.kernel_type in ("rmsnorm", "layernorm"):
            kind.mean_dims = mean_dims[path]
    return {path: kind for path, kind in kinds.items() if kind is not None}


def _fused_kind(module: nn.Module, ops: set[str]) -> _FusedModule | None:
    norm = _norm_kind(module, ops) or _inline_rmsnorm_kind(module, ops)
    if norm is not None:
        return _FusedModule(norm, module)
    activation = next((act for op, act in _ACTIVATIONS.items() if op in ops), None)
    if activation is not None and gated_mlp_dims(module) is not None:
        return _FusedModule("fused_mlp", module, activation)
    if is_rotary_name(type(module).__name__) and not ops & _MATMUL_OPS:
        return _FusedModule("rotary_embedding", module)
    return None


def _norm_kind(module: nn.Module, ops: set[str]) -> str | None:
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or set(params) - {"weight", "bias"} or any(module.children()) or ops & _MATMUL_OPS):
        return None
    class_name = type(module).__name__.lower()
    if "rmsnorm" in class_name or ops & _RMSNORM_OPS:
        return "rmsnorm"
    if "layernorm" in class_name or ops & _LAYERNORM_OPS or ("aten::mean" in ops and ops & _MEAN_SUBTRACTION_OPS):
        return "layernorm"
    return "rmsnorm" if ops & _ROOT_MEAN_SQUARE_OPS else None


# The root ops of an RMSNorm written inline, x / sqrt(mean(x ** 2, dim) + eps) or x * rsqrt(...).
_INLINE_RMSNORM_OPS = {"aten::pow", "aten::mul", "aten::square", "aten::mean", "aten::add", "aten::sqrt",
                       "aten::rsqrt", "aten::div", "aten::reciprocal", "aten::to", "aten::_to_copy", "aten::type_as"}


def _inline_rmsnorm_kind(module: nn.Module, ops: set[str]) -> str | None:
    """rmsnorm for a leaf module without a weight (or with a 1-D one) and with a float eps (the one
    rule routes.module_eps), whose own ops are only an RMSNorm's: KernelBench's inline form."""
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (set(params) - {"weight"} or (weight is not None and weight.dim() != 1) or any(module.children())
            or routes.module_eps(module) is None):
        return None
    if "aten::mean" in ops and ops & {"aten::sqrt", "aten::rsqrt"} and ops <= _INLINE_RMSNORM_OPS:
        return "rmsnorm"
    return None


def gated_mlp_dims(module: nn.Module) -> tuple[int, int] | None:
    """(D, F) when the module's direct Linear children are a gated MLP's gate, up and down."""
    linears = [child for child in module.children() if isinstance(child, nn.Linear)]
    for down in linears:
        dim, hidden = down.out_features, down.in_features
        inputs = [lin for lin in linears if lin is not down and lin.in_features == dim]
        separate = len(linears) == 3 and len(inputs) == 2 and all(lin.out_features == hidden for lin in inputs)
        fused = len(linears) == 2 and len(inputs) == 1 and inputs[0].out_features == 2 * hidden
        if separate or fused:
            return dim, hidden
    return None


# --------------------------------------------------------------------------- shapes
def _rows(shape, trailing: int = 1) -> dict:
    """(..., N) -> {"M": product of the leading sizes, "N": N}; N is the product of the last `trailing` sizes."""
    return {"M": math.prod(shape[:-trailing]), "N": math.prod(shape[-trailing:])}


def _bhsd(shape) -> dict | None:
    if shape is None or len(shape) not in (3, 4):
        return None
    batch, heads, seq, head_dim = (1, *shape) if len(shape) == 3 else shape
    return {"B": batch, "H": heads, "S": seq, "D": head_dim}


def _module_shape(fused: _FusedModule, input_shape: tuple[int, ...], roots: list[RootOp]) -> dict | None:
    if fused.kernel_type == "rotary_embedding":
        return _bhsd(input_shape) or _bhsd(_largest_head_tensor(roots))
    if not input_shape:
        return None
    if fused.kernel_type == "fused_mlp":
        dim, hidden = gated_mlp_dims(fused.module)
        return {"M": math.prod(input_shape[:-1]), "D": dim, "F": hidden, "act": fused.activation}
    return _norm_shape(fused, input_shape)


def _norm_shape(fused: _FusedModule, input_shape: tuple[int, ...]) -> dict | None:
    """A norm's shape: over dim 1 of (B, C, ...) when its means say so ({M: B, N: C, I: the rest}),
    else over as many trailing dims as its weight has (LayerNorm((C, H, W)): three), one without a
    weight over the last."""
    ndim = len(input_shape)
    dims = {tuple(d) if isinstance(d, (list, tuple)) else (d,) for d in fused.mean_dims or []}
    if len(dims) == 1 and ndim >= 3:
        (normalized,) = dims
        if all(isinstance(d, int) for d in normalized) and sorted(d % ndim for d in normalized) == [1]:
            return {"M": input_shape[0], "N": input_shape[1], "I": math.prod(input_shape[2:])}
    weight = getattr(fused.module, "weight", None)
    return _rows(input_shape, weight.dim() if isinstance(weight, torch.Tensor) else 1)


def _largest_head_tensor(roots: list[RootOp]) -> tuple[int, ...] | None:
    """The largest 4-D (else 3-D) input of these ops: the (B, H, S, D) tensor being rotated."""
    candidates = [tuple(shape) for root in roots for shape in root.event.input_shapes if len(shape) in (3, 4)]
    return max(candidates, key=lambda s: (len(s), math.prod(s))) if candidates else None


def _op_kernel_type(root: RootOp, has_nll_loss: bool) -> str:
    name = root.name
    if name in _LOG_SOFTMAX_OPS:
        return "cross_entropy" if has_nll_loss else OTHER
    if name.startswith("aten::_scaled_dot_product") or name == "aten::scaled_dot_product_attention":
        return "flash_attention"
    return _OP_KERNEL_TYPES.get(name, OTHER)


def _op_shape(kernel_type: str, root: RootOp) -> dict | None:
    shapes = [list(s) for s in root.event.input_shapes]
    if not shapes or not shapes[0] and kernel_type != "matmul":
        return None
    if kernel_type == "matmul":
        return _matmul_shape(root.name, shapes)
    if kernel_type in ("layernorm", "rmsnorm"):
        normalized = _argument(root.event, "normalized_shape")
        return _rows(shapes[0], len(normalized) if isinstance(normalized, (list, tuple)) and normalized else 1)
    if kernel_type == "softmax":
        return _rows(shapes[0])
    if kernel_type == "flash_attention":
        return _attention_shape(root.event, shapes[0], shapes[1] if len(shapes) > 1 else None)
    if kernel_type == "cross_entropy":
        # Classes are the last dimension of log_softmax's input and the second of the loss's logits.
        logits = shapes[0]
        classes = logits[-1] if root.name in _LOG_SOFTMAX_OPS or len(logits) < 2 else logits[1]
        return {"M": math.prod(logits) // classes, "V": classes}
    if kernel_type == "reduce":
        return _reduce_shape(root.event, shapes[0])
    return None


def _matmul_shape(op: str, shapes: list[list[int]]) -> dict | None:
    if op == "aten::linear":
        x, weight = shapes[0], shapes[1]
        return {"M": math.prod(x[:-1]), "N": weight[0], "K": x[-1]} if x and weight else None
    a, b = (shapes[1], shapes[2]) if op in ("aten::addmm", "aten::baddbmm") else (shapes[0], shapes[1])
    if not a or not b:
        return None
    # Batched products become one tall product with the same work: batch * M rows.
    batch = math.prod(b[:-2]) if len(a) <= 2 < len(b) else 1
    return {"M": math.prod(a[:-1]) * batch, "N": b[-1] if len(b) >= 2 else 1, "K": a[-1]}


def _attention_shape(event, query: list[int], key: list[int] | None) -> dict | None:
    shape = _bhsd(query)
    if shape is None:
        return None
    kv_heads = (_bhsd(key) or {}).get("H", shape["H"])
    if kv_heads != shape["H"] and kv_heads and shape["H"] % kv_heads == 0:
        # Grouped- or multi-query attention: fewer key/value heads than query heads (the registry's "KV").
        shape = {"B": shape["B"], "H": shape["H"], "KV": kv_heads, "S": shape["S"], "D": shape["D"]}
    shape["causal"] = int(bool(_argument(event, "is_causal")))
    scale = _argument(event, "scale")
    if isinstance(scale, float) and not math.isclose(scale, 1.0 / math.sqrt(shape["D"]), rel_tol=1e-6):
        shape["sm_scale"] = scale
    return shape


def _reduce_shape(event, x: list[int]) -> dict | None:
    """The reduce job's shape, or None (left as "other") where the router could not run the call:
    routes.reduction_layout is the one rule for both, so no job is planned that verify cannot use."""
    if _argument(event, "dtype") is not None:
        return None         # sum(x, dtype=...): the router leaves a dtype argument to PyTorch
    layout = routes.reduction_layout(x, _argument(event, "dim"))
    if isinstance(layout, str):
        return None
    return registry.reduce_shape(*layout, _REDUCE_OPS[event.name])


# --------------------------------------------------------------------------- attribution
def _group_call_sites(roots: list[RootOp], fused: dict[str, _FusedModule],
                      folded: dict | None = None) -> tuple[dict, dict]:
    """Root ops grouped by call site, key (kernel type, module path, where the shape comes from, detail),
    and the distinct calls behind each group."""
    has_nll_loss = any(root.name.startswith("aten::nll_loss") for root in roots)
    rotated = _rotated_shapes(roots, fused)
    groups: dict[tuple, list[RootOp]] = defaultdict(list)
    call_ids: dict[tuple, set[int]] = defaultdict(set)
    for root in roots:
        innermost = root.module_calls[0] if root.module_calls else ModuleCall("", (), 0)
        owner = _fused_owner(root, fused)
        call_id = id(root.event)
        fold = _fold_site(root, folded or {})
        if fold is not None:
            key, call_id = fold
        elif owner is not None:
            key = (fused[owner.path].kernel_type, owner.path, "module", owner.input_shape)
            call_id = owner.call_id
        elif root.rotary_call_id is not None or _is_rope_arithmetic(root, rotated.get(innermost.call_id)):
            key = ("rotary_embedding", innermost.path, "function", ())
            call_id = root.rotary_call_id
        else:
            kernel_type = _op_kernel_type(root, has_nll_loss)
            shape = _op_shape(kernel_type, root) if kernel_type != OTHER else None
            key = (kernel_type if shape else OTHER, innermost.path, "op", json.dumps(shape))
        groups[key].append(root)
        if call_id is not None:
            call_ids[key].add(call_id)
    return groups, call_ids


# --------------------------------------------------------------------------- folded norms
# A fused type that folds a norm into its consumers -> its shape from the rows, the consumer module
# and the activation the trace shows it running; in order of preference where two types fold one norm.
FOLD_SHAPES = {
    "rmsnorm_mlp": lambda rows, mlp, act: {"M": rows, "D": routes.mlp_linears(mlp)[0].in_features,
                                           "F": routes.mlp_linears(mlp)[0].out_features, "act": act},
    "rmsnorm_linear": lambda rows, linear, act: {"M": rows, "N": linear.out_features, "K": linear.in_features},
}


def _folded_paths(folds: dict, fused: dict[str, _FusedModule]) -> dict[str, tuple]:
    """Module path -> (fused type, the site's consumer path, the consumer, its traced activation), for every
    folded norm and consumer. An MLP fold counts only where the router will read the activation the trace
    shows (fold_routing.mlp_activation), so no job is planned that verify cannot route."""
    paths: dict[str, tuple] = {}
    for kernel_type in (t for t in FOLD_SHAPES if t in folds):
        for fold in folds[kernel_type].folds:
            if fold.norm_path in paths:
                continue
            traced = [fused[path].activation if path in fused else None for path in fold.consumer_paths]
            if kernel_type == "rmsnorm_mlp" and traced != [fold_routing.mlp_activation(c) for c in fold.consumers]:
                continue
            paths[fold.norm_path] = (kernel_type, fold.consumer_paths[0], fold.consumers[0], traced[0])
            for path, consumer, act in zip(fold.consumer_paths, fold.consumers, traced):
                paths[path] = (kernel_type, path, consumer, act)
    return paths


def _fold_site(root: RootOp, folded: dict) -> tuple[tuple, int | None] | None:
    """(group key, call id) of an op inside a folded norm or consumer; the norm's ops add no call."""
    for call in root.module_calls:
        if call.path in folded and call.input_shape:
            kernel_type, site_path, consumer, act = folded[call.path]
            shape = FOLD_SHAPES[kernel_type](math.prod(call.input_shape[:-1]), consumer, act)
            return (kernel_type, site_path, "op", json.dumps(shape)), (call.call_id if call.path == site_path else None)
    return None


def _fused_owner(root: RootOp, fused: dict[str, _FusedModule]) -> ModuleCall | None:
    return next((call for call in root.module_calls if call.path in fused), None)


def _rotated_shapes(roots: list[RootOp], fused: dict[str, _FusedModule]) -> dict[int, tuple[int, ...]]:
    """Module call id -> the largest head tensor its rotary functions touched."""
    in_functions: dict[int, list[RootOp]] = defaultdict(list)
    for root in roots:
        if root.rotary_call_id is not None and root.module_calls and _fused_owner(root, fused) is None:
            in_functions[root.module_calls[0].call_id].append(root)
    shapes = {call_id: _largest_head_tensor(members) for call_id, members in in_functions.items()}
    return {call_id: shape for call_id, shape in shapes.items() if shape is not None}


def _is_rope_arithmetic(root: RootOp, rotated: tuple[int, ...] | None) -> bool:
    """x * cos, rotate_half(x) * sin and their sum, written inline next to a rotate-half function."""
    if rotated is None or root.name not in ("aten::mul", "aten::add", "aten::sub"):
        return False
    shapes = [tuple(shape) for shape in root.event.input_shapes[:2]]
    if len(shapes) < 2 or not all(shapes):
        return False     # a product with a Python number is a scale, not a rotation
    heads = {rotated, rotated[:-1] + (rotated[-1] // 2,)}
    if root.name != "aten::mul":
        return shapes[0] in heads and shapes[1] in heads
    x, table = shapes if shapes[0] in heads else shapes[::-1]
    # The cos / sin table broadcasts over batch and heads: its last two sizes are (S, width of x).
    return x in heads and len(table) >= 2 and table[-2:] == x[-2:]

