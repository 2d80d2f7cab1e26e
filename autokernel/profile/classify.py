"""Attributes the ops of a profiler trace to the registry kernel types (or "other"), each with its registry shape.

A root op is an op not called by another op (aten::linear, not the aten::addmm inside it); all the
time under it counts once, for it. Every module call is marked in the trace by a range
`autokernel::<module path>#<input shape>` (autokernel/profile/profiler.py sets them), and each root op then
belongs to:
  1. the innermost enclosing module that is one kernel of its own, as a type recognises it from
     the module's structure and the ops it ran (Recognition.module: a norm, a gated MLP, a
     rotary module), with the shape the type reads from the call;
  2. else, a Python function on the call stack that a type recognises by name (rotate_half:
     Recognition.function), together with the ops written inline beside it in the same module
     call that the type says belong to it; one entry per module call site;
  3. else, the type whose profiled_ops (or claims_op) name the op, shape from the op's recorded
     input shapes (Recognition.op_shape); anything else is "other".
Before all of these, a norm folded into its consumers (`folds`, found by autokernel/routing/norm_folding.py
on a real forward: its output goes only to those modules) counts with them as one fused type
(KernelType.fold), and the norm's ops join the first consumer's site, since the fused kernels
replace the norm and the consumers together. A norm two fold types could fold goes to the one
of lower FoldType.preference.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

from torch import nn
from torch.autograd import DeviceType

from autokernel.core.plan import OTHER     # the time no kernel type names: its name in the plan
from autokernel.kernel_types import TYPES
from autokernel.kernel_types.base import ModuleMatch
from autokernel.routing.fold_routing import FOLD_TYPES

RANGE_PREFIX = "autokernel::"
FUNCTION_RANGE_PREFIX = "autokernel.fn: "     # "<prefix><name>": its tail after ": " is the function's name

# Which type an op's own name makes it: each registry entry lists its ops (KernelType.profiled_ops).
_OP_KERNEL_TYPES = {op: kt.name for kt in TYPES.values() for op in kt.profiled_ops}
_FUNCTION_TYPES = [kt for kt in TYPES.values() if kt.recognise.function is not None]
FOLD_POLICY = "; ".join(fold.policy for fold in FOLD_TYPES.values())     # the plan's "fold_policy"


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
    # (kernel type, call id) of the outermost enclosing Python function call a type recognises by name
    function_call: tuple[str, int] | None
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
    calls: int                       # distinct calls: module calls, recognised function calls or ops
    roots: list[RootOp]


@dataclass
class Attribution:
    """A classified trace: its root ops, their call sites and the time measured."""
    roots: list[RootOp]              # every root op, its kernel_type and shape set
    sites: list[SiteOps]             # the call sites of a registry kernel type, in trace order
    measured_us: float               # all measured time in the trace


def attribute(events, model: nn.Module, on_gpu: bool, folds: dict | None = None) -> Attribution:
    """Classify the root ops of a trace of `model` (torch.profiler events) and group them by call site.

    folds: kernel type -> the FoldSearch of autokernel/routing/norm_folding.py for it (profiler.find_profiled_folds)."""
    roots, measured_us = _collect_root_ops(events, on_gpu)
    fused = _fused_modules(model, roots)
    groups, call_ids = _group_call_sites(roots, fused, _folded_paths(folds or {}, fused))
    sites = []
    for key, members in groups.items():
        kernel_type, path, source, detail = key
        if source == "module":
            shape = fused[path].shape(detail, members)
        elif source == "function":
            shape = TYPES[kernel_type].recognise.function.shape(members)
        else:
            shape = json.loads(detail)
        for root in members:
            root.kernel_type, root.shape = (kernel_type if shape else OTHER), shape
        if shape and kernel_type != OTHER:
            sites.append(SiteOps(kernel_type, path, shape, len(call_ids[key]), members))
    return Attribution(roots, sites, measured_us)


def recognised_function_type(name: str) -> str | None:
    """The kernel type whose Python functions are named like this (rotate_half), or None."""
    return next((kt.name for kt in _FUNCTION_TYPES if kt.recognise.function.is_name(name)), None)


def may_be_one_kernel(module: nn.Module) -> bool:
    """Whether a type could count this module as one kernel of its own by its structure alone (a gated MLP,
    a rotary module): such a module may be replaced by that kernel (profiler.find_profiled_folds)."""
    return any(kt.recognise.replaces_module(module) for kt in TYPES.values() if kt.recognise.replaces_module)


# --------------------------------------------------------------------------- reading the trace
def _module_call(event) -> ModuleCall:
    path, _, shape = event.name[len(RANGE_PREFIX):].rpartition("#")
    return ModuleCall(path, tuple(int(size) for size in shape.split(",") if size), id(event))


def _is_python_function(event) -> bool:
    # torch 2.12 put the Python frames that with_stack records into the event list, flagged so;
    # older releases (the GPU image's 2.11) leave them out and have no flag. The profiler also puts
    # a range around each call of a recognised function of the model's own modules
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
        root_event, function_call, node = None, None, event
        while node is not None and not node.name.startswith(RANGE_PREFIX):
            if not _is_python_function(node):
                root_event = node
            else:
                kernel_type = recognised_function_type(node.name.rsplit(": ", 1)[-1])
                if kernel_type is not None:
                    function_call = (kernel_type, id(node))
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
            root = roots[id(root_event)] = RootOp(root_event, name, calls, function_call)
        root.time_us += self_us
    return list(roots.values()), measured_us


# --------------------------------------------------------------------------- modules that are one kernel
def _fused_modules(model: nn.Module, roots: list[RootOp]) -> dict[str, ModuleMatch]:
    """The module paths whose whole call is one kernel of a registry type, as the first type to recognise it says."""
    under: dict[str, list[RootOp]] = defaultdict(list)
    for root in roots:
        for call in root.module_calls:
            under[call.path].append(root)
    modules = dict(model.named_modules())
    recognisers = [kt.recognise.module for kt in TYPES.values() if kt.recognise.module is not None]
    found = {}
    for path, members in under.items():
        ops = {root.name for root in members}
        match = next(filter(None, (recognise(modules[path], ops, members) for recognise in recognisers)), None)
        if match is not None:
            found[path] = match
    return found


# --------------------------------------------------------------------------- ops by their names
def _op_kernel_type(root: RootOp, trace_ops: set[str]) -> str:
    if root.name in _OP_KERNEL_TYPES:
        return _OP_KERNEL_TYPES[root.name]
    return next((kt.name for kt in TYPES.values()
                 if kt.recognise.claims_op is not None and kt.recognise.claims_op(root.name, trace_ops)), OTHER)


def _op_shape(kernel_type: str, root: RootOp) -> dict | None:
    shapes = [list(s) for s in root.event.input_shapes]
    read = TYPES[kernel_type].recognise.op_shape
    return read(root.name, root.event, shapes) if shapes and read is not None else None


# --------------------------------------------------------------------------- attribution
def _group_call_sites(roots: list[RootOp], fused: dict[str, ModuleMatch],
                      folded: dict | None = None) -> tuple[dict, dict]:
    """Root ops grouped by call site, key (kernel type, module path, where the shape comes from, detail),
    and the distinct calls behind each group."""
    trace_ops = {root.name for root in roots}
    touched = _function_touched(roots, fused)
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
        elif root.function_call is not None:
            key = (root.function_call[0], innermost.path, "function", ())
            call_id = root.function_call[1]
        elif (joined := _joined_function(root, touched, innermost)) is not None:
            key, call_id = (joined, innermost.path, "function", ()), None
        else:
            kernel_type = _op_kernel_type(root, trace_ops)
            shape = _op_shape(kernel_type, root) if kernel_type != OTHER else None
            key = (kernel_type if shape else OTHER, innermost.path, "op", json.dumps(shape))
        groups[key].append(root)
        if call_id is not None:
            call_ids[key].add(call_id)
    return groups, call_ids


def _fused_owner(root: RootOp, fused: dict[str, ModuleMatch]) -> ModuleCall | None:
    return next((call for call in root.module_calls if call.path in fused), None)


def _function_touched(roots: list[RootOp], fused: dict[str, ModuleMatch]) -> dict[tuple[int, str], tuple]:
    """(module call id, kernel type) -> the tensor shape the type's recognised functions worked on in that call."""
    in_functions: dict[tuple[int, str], list[RootOp]] = defaultdict(list)
    for root in roots:
        if root.function_call is not None and root.module_calls and _fused_owner(root, fused) is None:
            in_functions[(root.module_calls[0].call_id, root.function_call[0])].append(root)
    shapes = {key: TYPES[key[1]].recognise.function.touched(members) for key, members in in_functions.items()}
    return {key: shape for key, shape in shapes.items() if shape is not None}


def _joined_function(root: RootOp, touched: dict[tuple[int, str], tuple], innermost: ModuleCall) -> str | None:
    """The type of a recognised function called in the same module call whose computation this op, written
    inline beside it, is part of (the products with cos and sin around rotate_half)."""
    return next((kt.name for kt in _FUNCTION_TYPES if (innermost.call_id, kt.name) in touched
                 and kt.recognise.function.joins(root, touched[(innermost.call_id, kt.name)])), None)


# --------------------------------------------------------------------------- folded norms
def _folded_paths(folds: dict, fused: dict[str, ModuleMatch]) -> dict[str, tuple]:
    """Module path -> (fold type, the site's consumer path, the consumer, its traced activation), for every
    folded norm and consumer. A fold counts only where the router will read it as traced (FoldType.plannable),
    so no job is planned that verify cannot route."""
    paths: dict[str, tuple] = {}
    for fold_type in (fold_type for fold_type in FOLD_TYPES.values() if fold_type.kernel_type in folds):
        for fold in folds[fold_type.kernel_type].folds:
            if fold.norm_path in paths:
                continue
            traced = [fused[path].activation if path in fused else None for path in fold.consumer_paths]
            if not fold_type.plannable(fold.consumers, traced):
                continue
            paths[fold.norm_path] = (fold_type, fold.consumer_paths[0], fold.consumers[0], traced[0])
            for path, consumer, act in zip(fold.consumer_paths, fold.consumers, traced):
                paths[path] = (fold_type, path, consumer, act)
    return paths


def _fold_site(root: RootOp, folded: dict) -> tuple[tuple, int | None] | None:
    """(group key, call id) of an op inside a folded norm or consumer; the norm's ops add no call."""
    for call in root.module_calls:
        if call.path in folded and call.input_shape:
            fold_type, site_path, consumer, act = folded[call.path]
            shape = fold_type.site_shape(math.prod(call.input_shape[:-1]), consumer, act)
            key = (fold_type.kernel_type, site_path, "op", json.dumps(shape))
            return key, (call.call_id if call.path == site_path else None)
    return None
