"""Profiles a model with torch.profiler, attributes its time to kernel types and ranks them by Amdahl's law.

What is measured: after warm-up, `iters` forward passes under torch.no_grad. On a GPU the time of
an op is the kernel time it launched (self device time); without one it is CPU op time. Times in
the report are per forward pass.

How time is attributed. A root op is an op not called by another op (aten::linear, not the
aten::addmm inside it); all the time under it counts once, for it. Every module call is marked in
the trace by a range `autokernel::<module path>#<input shape>`, and each root op then belongs to:
  1. the innermost enclosing module that is one kernel of its own, found by structure:
     - a norm: a leaf module whose only parameters are a 1-D weight (and bias) -> rmsnorm when it
       runs rsqrt / sqrt / rms_norm without subtracting a mean, layernorm when it subtracts the mean
       (class names containing RMSNorm / LayerNorm decide ties); shape {M, N} from its input;
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
The plan lists every kernel type with its share of the measured time, the end-to-end speedup if
it ran 2x faster (1 / ((1 - p) + p / 2)), and where its work sits on the GPU's roofline.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.autograd import DeviceType

from autokernel import hardware, paths, registry
from autokernel.timing import roofline

OTHER = "other"
COVERAGE_TARGET = 0.95
RANGE_PREFIX = "autokernel::"
REPORT_FILE = "profile_report.json"
PLAN_FILE = "optimization_plan.json"

_OP_KERNEL_TYPES = {
    "aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul", "aten::baddbmm": "matmul",
    "aten::matmul": "matmul", "aten::linear": "matmul",
    "aten::softmax": "softmax", "aten::_softmax": "softmax",
    "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
    "aten::rms_norm": "rmsnorm", "aten::_fused_rms_norm": "rmsnorm",
    "aten::_flash_attention_forward": "flash_attention", "aten::_efficient_attention_forward": "flash_attention",
    "aten::cross_entropy_loss": "cross_entropy", "aten::nll_loss": "cross_entropy",
    "aten::nll_loss_nd": "cross_entropy", "aten::nll_loss_forward": "cross_entropy",
    "aten::nll_loss2d": "cross_entropy",
    "aten::sum": "reduce", "aten::amax": "reduce", "aten::max": "reduce",
}
_LOG_SOFTMAX_OPS = {"aten::log_softmax", "aten::_log_softmax"}
_MATMUL_OPS = {op for op, kind in _OP_KERNEL_TYPES.items() if kind == "matmul"}
_LAYERNORM_OPS = {"aten::layer_norm", "aten::native_layer_norm"}
_RMSNORM_OPS = {"aten::rms_norm", "aten::_fused_rms_norm"}
_ROOT_MEAN_SQUARE_OPS = {"aten::rsqrt", "aten::sqrt", "aten::norm", "aten::linalg_vector_norm"}
_MEAN_SUBTRACTION_OPS = {"aten::sub", "aten::var", "aten::var_mean"}
# Activation op -> fused_mlp "act" value; relu is taken as the squared-ReLU ("relu2") MLP.
_ACTIVATIONS = {"aten::silu": "silu", "aten::gelu": "gelu", "aten::relu": "relu2"}
_MLP_POLICY = ("gated MLP modules (gate/up/down linears + activation) count as fused_mlp, not matmul; "
               "ungated MLP linears count as matmul and their activation as other")


@dataclass
class OpTime:
    """One root op at one input shape and classification, summed over the model, per forward pass."""
    op: str
    input_shapes: list
    kernel_type: str
    shape: dict | None
    calls: float
    time_ms: float
    module_paths: list[str]


@dataclass
class CallSite:
    """The time one place in the model spends in one kernel type at one shape, per forward pass."""
    kernel_type: str
    module_path: str
    shape: dict
    calls: float
    time_ms: float
    ops: list[str]


@dataclass
class ProfileReport:
    model_name: str
    device: str                 # "cuda" or "cpu"
    device_name: str
    dtype: str                  # "float16", "bfloat16" or "float32"
    timing: str                 # what the times are: GPU kernel time or CPU op time
    iterations: int
    total_ms: float             # all measured time per forward pass
    wall_ms: float              # one forward pass timed without the profiler
    ops: list[OpTime]
    call_sites: list[CallSite]
    other_ms: float             # measured time in ops of no kernel type

    @property
    def attributed_ms(self) -> float:
        return sum(site.time_ms for site in self.call_sites) + self.other_ms

    @property
    def coverage(self) -> float:
        return self.attributed_ms / self.total_ms if self.total_ms > 0 else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "attributed_ms": self.attributed_ms, "coverage": self.coverage}


def amdahl_speedup(share: float, factor: float = 2.0) -> float:
    """End-to-end speedup when a part taking `share` of the time becomes `factor` times faster."""
    return 1.0 / ((1.0 - share) + share / factor)


# --------------------------------------------------------------------------- running the profiler
class _ModuleRanges:
    """Marks every module call in the trace with a range `autokernel::<path>#<input shape>`."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.handles: list = []
        self.open_ranges: list = []

    def __enter__(self) -> "_ModuleRanges":
        for path, module in self.model.named_modules():
            self.handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, path=path: self._enter(path, args, kwargs), with_kwargs=True))
            # always_call keeps the ranges balanced when a forward raises.
            self.handles.append(module.register_forward_hook(lambda *_: self._exit(), always_call=True))
        return self

    def _enter(self, path: str, args: tuple, kwargs: dict) -> None:
        # Few Python calls here: with_stack records every one of them as an event of its own.
        tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
        shape = ",".join(map(str, tensors[0].shape)) if tensors else ""
        # The ops record_function itself calls: its constructor costs more Python than the range.
        self.open_ranges.append(torch.ops.profiler._record_function_enter_new(f"{RANGE_PREFIX}{path}#{shape}", None))

    def _exit(self) -> None:
        torch.ops.profiler._record_function_exit._RecordFunction(self.open_ranges.pop())

    def __exit__(self, *exc_info) -> None:
        for handle in self.handles:
            handle.remove()


def profile_model(model: nn.Module, inputs, *, warmup: int = 3, iters: int = 10,
                  name: str | None = None) -> ProfileReport:
    """Profile `iters` forward passes of model(*inputs) after `warmup` unprofiled ones."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    device = _model_device(model, inputs)
    on_gpu = device.type == "cuda"
    synchronize = torch.cuda.synchronize if on_gpu else (lambda: None)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            model(*inputs)
        synchronize()
        wall_ms = (time.perf_counter() - start) * 1e3 / iters
        # with_stack records Python function calls, which is how a rotary function is recognised.
        with torch.profiler.profile(activities=activities, record_shapes=True, with_stack=True) as prof:
            with _ModuleRanges(model):
                for _ in range(iters):
                    model(*inputs)
                synchronize()
    return _build_report(prof.events(), model, iters, on_gpu, wall_ms,
                         name=name or type(model).__name__, dtype=_model_dtype(model, inputs),
                         device_name=torch.cuda.get_device_name(device) if on_gpu else "cpu")


def _model_device(model: nn.Module, inputs: tuple) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers(), *inputs):
        if isinstance(tensor, torch.Tensor):
            return tensor.device
    return torch.device("cpu")


def _model_dtype(model: nn.Module, inputs: tuple) -> torch.dtype:
    for tensor in (*model.parameters(), *inputs):
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


# --------------------------------------------------------------------------- reading the trace
@dataclass
class _ModuleCall:
    path: str
    input_shape: tuple[int, ...]
    call_id: int


@dataclass
class _RootOp:
    """An op not called by another op, with everything the attribution needs about where it ran."""
    event: object                    # the torch FunctionEvent
    name: str
    module_calls: list[_ModuleCall]  # innermost first
    rotary_call_id: int | None       # the outermost enclosing rotary-named Python function call
    time_us: float = 0.0


def _module_call(event) -> _ModuleCall:
    path, _, shape = event.name[len(RANGE_PREFIX):].rpartition("#")
    return _ModuleCall(path, tuple(int(size) for size in shape.split(",") if size), id(event))


def _collect_root_ops(events, on_gpu: bool) -> tuple[list[_RootOp], float]:
    """Root ops with all the time under them, and the total measured time, in microseconds."""
    roots: dict[int, _RootOp] = {}
    measured_us = 0.0
    for event in events:
        if event.device_type != DeviceType.CPU:
            # Device-side events: kernels and memcpys count toward the measured total; GPU copies
            # of the module ranges (user annotations) span other kernels and would count twice.
            if not event.is_user_annotation and not event.name.startswith(RANGE_PREFIX):
                measured_us += event.device_time_total
            continue
        if event.is_async or event.is_python_function:
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
            if not node.is_python_function:
                root_event = node
            elif _is_rotary_name(node.name.rsplit(": ", 1)[-1]):
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
            root = roots[id(root_event)] = _RootOp(root_event, name, calls, rotary_call)
        root.time_us += self_us
    return list(roots.values()), measured_us


def _is_rotary_name(name: str) -> bool:
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


def _fused_modules(model: nn.Module, roots: list[_RootOp]) -> dict[str, _FusedModule]:
    """The module paths whose whole call is one kernel of a registry type."""
    ops_under: dict[str, set[str]] = defaultdict(set)
    for root in roots:
        for call in root.module_calls:
            ops_under[call.path].add(root.name)
    modules = dict(model.named_modules())
    kinds = {path: _fused_kind(modules[path], ops) for path, ops in ops_under.items()}
    return {path: kind for path, kind in kinds.items() if kind is not None}


def _fused_kind(module: nn.Module, ops: set[str]) -> _FusedModule | None:
    norm = _norm_kind(module, ops)
    if norm is not None:
        return _FusedModule(norm, module)
    activation = next((act for op, act in _ACTIVATIONS.items() if op in ops), None)
    if activation is not None and _gated_mlp_dims(module) is not None:
        return _FusedModule("fused_mlp", module, activation)
    if _is_rotary_name(type(module).__name__) and not ops & _MATMUL_OPS:
        return _FusedModule("rotary_embedding", module)
    return None


def _norm_kind(module: nn.Module, ops: set[str]) -> str | None:
    params = dict(module.named_parameters(recurse=False))
    weight = params.get("weight")
    if (weight is None or weight.dim() != 1 or set(params) - {"weight", "bias"} or any(module.children())
            or ops & _MATMUL_OPS):
        return None
    class_name = type(module).__name__.lower()
    if "rmsnorm" in class_name or ops & _RMSNORM_OPS:
        return "rmsnorm"
    if "layernorm" in class_name or ops & _LAYERNORM_OPS or ("aten::mean" in ops and ops & _MEAN_SUBTRACTION_OPS):
        return "layernorm"
    return "rmsnorm" if ops & _ROOT_MEAN_SQUARE_OPS else None


def _gated_mlp_dims(module: nn.Module) -> tuple[int, int] | None:
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
def _rows(shape) -> dict:
    """(..., N) -> {"M": product of the leading sizes, "N": N}."""
    return {"M": math.prod(shape[:-1]), "N": shape[-1]}


def _bhsd(shape) -> dict | None:
    if shape is None or len(shape) not in (3, 4):
        return None
    batch, heads, seq, head_dim = (1, *shape) if len(shape) == 3 else shape
    return {"B": batch, "H": heads, "S": seq, "D": head_dim}


def _module_shape(fused: _FusedModule, input_shape: tuple[int, ...], roots: list[_RootOp]) -> dict | None:
    if fused.kernel_type == "rotary_embedding":
        return _bhsd(input_shape) or _bhsd(_largest_head_tensor(roots))
    if not input_shape:
        return None
    if fused.kernel_type == "fused_mlp":
        dim, hidden = _gated_mlp_dims(fused.module)
        return {"M": math.prod(input_shape[:-1]), "D": dim, "F": hidden, "act": fused.activation}
    return _rows(input_shape)


def _largest_head_tensor(roots: list[_RootOp]) -> tuple[int, ...] | None:
    """The largest 4-D (else 3-D) input of these ops: the (B, H, S, D) tensor being rotated."""
    candidates = [tuple(shape) for root in roots for shape in root.event.input_shapes if len(shape) in (3, 4)]
    return max(candidates, key=lambda s: (len(s), math.prod(s))) if candidates else None


def _op_kernel_type(root: _RootOp, has_nll_loss: bool) -> str:
    name = root.name
    if name in _LOG_SOFTMAX_OPS:
        return "cross_entropy" if has_nll_loss else OTHER
    if name.startswith("aten::_scaled_dot_product") or name == "aten::scaled_dot_product_attention":
        return "flash_attention"
    if name == "aten::max" and _argument(root.event, "dim") is None:
        return OTHER        # elementwise max, or a max over everything
    return _OP_KERNEL_TYPES.get(name, OTHER)


def _op_shape(kernel_type: str, root: _RootOp) -> dict | None:
    shapes = [list(s) for s in root.event.input_shapes]
    if not shapes or not shapes[0] and kernel_type != "matmul":
        return None
    if kernel_type == "matmul":
        return _matmul_shape(root.name, shapes)
    if kernel_type in ("softmax", "layernorm", "rmsnorm"):
        return _rows(shapes[0])
    if kernel_type == "flash_attention":
        return _attention_shape(root.event, shapes[0])
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


def _attention_shape(event, query: list[int]) -> dict | None:
    shape = _bhsd(query)
    if shape is None:
        return None
    shape["causal"] = int(bool(_argument(event, "is_causal")))
    scale = _argument(event, "scale")
    if isinstance(scale, float) and not math.isclose(scale, 1.0 / math.sqrt(shape["D"]), rel_tol=1e-6):
        shape["sm_scale"] = scale
    return shape


def _reduce_shape(event, x: list[int]) -> dict:
    op = "sum" if event.name == "aten::sum" else "max"
    dims = _argument(event, "dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    numel = math.prod(x)
    if not dims:
        return {"M": 1, "N": numel, "dim": -1, "op": op}
    reduced_dims = sorted(d % len(x) for d in dims)
    reduced = math.prod(x[d] for d in reduced_dims)
    if reduced_dims == list(range(len(x) - len(reduced_dims), len(x))):
        return {"M": numel // reduced, "N": reduced, "dim": -1, "op": op}
    # A middle dimension has the same work as a column reduction of a (reduced, rest) matrix.
    return {"M": reduced, "N": numel // reduced, "dim": 0, "op": op}


# --------------------------------------------------------------------------- attribution
def _group_call_sites(roots: list[_RootOp], fused: dict[str, _FusedModule]) -> tuple[dict, dict]:
    """Root ops grouped by call site, key (kernel type, module path, where the shape comes from, detail),
    and the distinct calls behind each group."""
    has_nll_loss = any(root.name.startswith("aten::nll_loss") for root in roots)
    rotated = _rotated_shapes(roots, fused)
    groups: dict[tuple, list[_RootOp]] = defaultdict(list)
    call_ids: dict[tuple, set[int]] = defaultdict(set)
    for root in roots:
        innermost = root.module_calls[0] if root.module_calls else _ModuleCall("", (), 0)
        owner = _fused_owner(root, fused)
        call_id = id(root.event)
        if owner is not None:
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


def _fused_owner(root: _RootOp, fused: dict[str, _FusedModule]) -> _ModuleCall | None:
    return next((call for call in root.module_calls if call.path in fused), None)


def _rotated_shapes(roots: list[_RootOp], fused: dict[str, _FusedModule]) -> dict[int, tuple[int, ...]]:
    """Module call id -> the largest head tensor its rotary functions touched."""
    in_functions: dict[int, list[_RootOp]] = defaultdict(list)
    for root in roots:
        if root.rotary_call_id is not None and root.module_calls and _fused_owner(root, fused) is None:
            in_functions[root.module_calls[0].call_id].append(root)
    shapes = {call_id: _largest_head_tensor(members) for call_id, members in in_functions.items()}
    return {call_id: shape for call_id, shape in shapes.items() if shape is not None}


def _is_rope_arithmetic(root: _RootOp, rotated: tuple[int, ...] | None) -> bool:
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


def _build_report(events, model: nn.Module, iters: int, on_gpu: bool, wall_ms: float, *,
                  name: str, dtype: torch.dtype, device_name: str) -> ProfileReport:
    roots, measured_us = _collect_root_ops(events, on_gpu)
    fused = _fused_modules(model, roots)
    groups, call_ids = _group_call_sites(roots, fused)
    per_iteration_ms = 1e-3 / iters
    call_sites, shapes_of = [], {}
    for key, members in groups.items():
        kernel_type, path, source, detail = key
        if source == "module":
            shape = _module_shape(fused[path], detail, members)
        elif source == "function":
            shape = _bhsd(_largest_head_tensor(members))
        else:
            shape = json.loads(detail)
        for root in members:
            shapes_of[id(root)] = (kernel_type if shape else OTHER, shape)
        if shape and kernel_type != OTHER:
            call_sites.append(CallSite(kernel_type, path, shape, len(call_ids[key]) / iters,
                                       sum(r.time_us for r in members) * per_iteration_ms,
                                       sorted({r.name for r in members})))
    call_sites.sort(key=lambda site: -site.time_ms)
    other_ms = sum(r.time_us for r in roots if shapes_of[id(r)][0] == OTHER) * per_iteration_ms
    return ProfileReport(
        model_name=name, device="cuda" if on_gpu else "cpu", device_name=device_name,
        dtype=str(dtype).removeprefix("torch."), timing="GPU kernel time" if on_gpu else "CPU op time",
        iterations=iters, total_ms=measured_us * per_iteration_ms, wall_ms=wall_ms,
        ops=_op_times(roots, shapes_of, iters), call_sites=call_sites, other_ms=other_ms)


def _op_times(roots: list[_RootOp], shapes_of: dict, iters: int) -> list[OpTime]:
    """Root ops summed by (op, input shapes, kernel type, shape), most time first."""
    members: dict[tuple, list[_RootOp]] = defaultdict(list)
    for root in roots:
        kernel_type, shape = shapes_of[id(root)]
        input_shapes = [list(s) for s in root.event.input_shapes]
        members[(root.name, json.dumps(input_shapes), kernel_type, json.dumps(shape))].append(root)
    rows = []
    for (op, input_shapes, kernel_type, shape), same in members.items():
        module_paths = dict.fromkeys(r.module_calls[0].path if r.module_calls else "" for r in same)
        rows.append(OpTime(op, json.loads(input_shapes), kernel_type, json.loads(shape), len(same) / iters,
                           sum(r.time_us for r in same) * 1e-3 / iters, list(module_paths)))
    return sorted(rows, key=lambda row: -row.time_ms)


# --------------------------------------------------------------------------- the plan
def build_plan(report: ProfileReport, gpu: hardware.GPUSpec) -> dict:
    """Kernel types ranked by measured time, each with its Amdahl figure and roofline placement."""
    dtype = getattr(torch, report.dtype)
    by_type: dict[str, list[CallSite]] = defaultdict(list)
    for site in report.call_sites:
        by_type[site.kernel_type].append(site)
    entries = [_plan_entry(kernel_type, sites, report, dtype, gpu) for kernel_type, sites in by_type.items()]
    entries.sort(key=lambda entry: -entry["time_ms"])
    for rank, entry in enumerate(entries, start=1):
        entry["rank"] = rank
    other_share = report.other_ms / report.total_ms if report.total_ms > 0 else 0.0
    return {
        "model": report.model_name, "device": report.device, "device_name": report.device_name,
        "gpu": gpu.name, "dtype": report.dtype, "timing": report.timing, "total_ms": report.total_ms,
        "wall_ms": report.wall_ms, "coverage": report.coverage, "coverage_target": COVERAGE_TARGET,
        "mlp_policy": _MLP_POLICY, "other": {"time_ms": report.other_ms, "share": other_share},
        "entries": entries,
    }


def _plan_entry(kernel_type: str, sites: list[CallSite], report: ProfileReport, dtype: torch.dtype,
                gpu: hardware.GPUSpec) -> dict:
    shape_times: dict[str, float] = defaultdict(float)
    shape_calls: dict[str, float] = defaultdict(float)
    for site in sites:
        shape_times[registry.format_shape(site.shape)] += site.time_ms
        shape_calls[registry.format_shape(site.shape)] += site.calls
    ordered = sorted(shape_times, key=lambda text: -shape_times[text])
    shapes = [registry.parse_shape(text) for text in ordered]
    time_ms = sum(shape_times.values())
    share = time_ms / report.total_ms if report.total_ms > 0 else 0.0
    entry = {
        "rank": 0, "kernel_type": kernel_type, "dtype": report.dtype, "time_ms": time_ms, "share": share,
        "amdahl_2x": amdahl_speedup(share), "calls": sum(shape_calls.values()),
        "shapes": shapes, "shape_times_ms": [shape_times[text] for text in ordered],
        "bound": None, "throughput": None, "pct_peak": None,
        "module_paths": sorted({site.module_path for site in sites}),
    }
    if gpu.ridge_point(dtype) is not None:
        # Every call of every shape: the work's place on this GPU's roofline, and, when the times
        # are GPU times, how fast the op runs now.
        calls = [shape for text, shape in zip(ordered, shapes) for _ in range(max(1, round(shape_calls[text])))]
        placed = roofline(registry.get(kernel_type), calls, dtype, time_ms, gpu)
        entry["bound"] = placed.bound
        if report.device == "cuda":
            entry.update(throughput=f"{placed.throughput:.1f} {placed.unit}", pct_peak=placed.pct_peak)
    return entry


# --------------------------------------------------------------------------- output
def write_outputs(report: ProfileReport, plan: dict, workspace: str | Path | None = None) -> tuple[Path, Path]:
    """Write profile_report.json and optimization_plan.json into the workspace; return their paths."""
    folder = Path(workspace) if workspace is not None else paths.WORKSPACE
    folder.mkdir(parents=True, exist_ok=True)
    report_path, plan_path = folder / REPORT_FILE, folder / PLAN_FILE
    report_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    plan_path.write_text(json.dumps(plan, indent=2) + "\n")
    return report_path, plan_path


def profile_to_workspace(model: nn.Module, inputs, *, name: str, workspace: str | Path | None = None,
                         warmup: int = 3, iters: int = 10, gpu: hardware.GPUSpec | None = None
                         ) -> tuple[ProfileReport, dict]:
    """Profile, plan against this machine's GPU (or `gpu`), and write both JSON files into the workspace."""
    report = profile_model(model, inputs, warmup=warmup, iters=iters, name=name)
    plan = build_plan(report, gpu or hardware.detect())
    write_outputs(report, plan, workspace)
    return report, plan


def print_plan(plan: dict, top: int | None = None, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"Where {plan['model']} spends its time ({plan['timing']}, {plan['dtype']}, "
                        f"{plan['total_ms']:.3f} ms per forward pass)")
    for column in ("#", "kernel type", "ms", "share", "2x gives", "bound"):
        table.add_column(column, justify="left" if column in ("kernel type", "bound") else "right", no_wrap=True)
    table.add_column("main shape", overflow="fold", min_width=12)
    for entry in plan["entries"][:top]:
        table.add_row(str(entry["rank"]), entry["kernel_type"], f"{entry['time_ms']:.3f}", f"{entry['share']:.1%}",
                      f"{entry['amdahl_2x']:.3f}x", entry["bound"] or "-", registry.format_shape(entry["shapes"][0]))
    other = plan["other"]
    table.add_row("", OTHER, f"{other['time_ms']:.3f}", f"{other['share']:.1%}",
                  f"{amdahl_speedup(other['share']):.3f}x", "-", "")
    console.print(table)
    coverage = plan["coverage"]
    style = "green" if coverage >= COVERAGE_TARGET else "bold red"
    console.print(f"[{style}]coverage: {coverage:.1%} of measured time attributed "
                  f"(target {COVERAGE_TARGET:.0%})[/{style}]")
    if plan["device"] != "cuda":
        console.print("[yellow]no GPU: times are CPU op times, only useful for testing the pipeline[/yellow]")
