"""Linears that read the same input run as one GEMM, for inference: a rewrite that keeps the math.

An attention's query, key and value projections (and a gated MLP's gate and up projections) are two or
three GEMMs over one activation. Concatenated along their outputs, W = [W_q; W_k; W_v], they are one GEMM
that reads the activation once and fills the GPU with one launch of a wider N; each projection's output is
its slice of the columns. torch.compile's default mode does not make this rewrite: Inductor's concat-linear
patterns (torch/_inductor/fx_passes/freezing_patterns.py) run only with `freezing` on, and its batch_linear
fusions only when listed in pre_grad_fusion_options, empty by default.

Which linears share an input is found by watching one real forward, not from their names: every
nn.Linear's pre-hook notes the tensor it reads (the Python object, its version, data pointer, shape and
stride; the object through a weak reference, so that an id reused by a later tensor is told apart without
keeping every layer's activations alive). Linears of the same dtype, device and input width, all with a
bias or all without, that read the same tensors on every call of the watched forward form a group.

Why the linears' forwards and not their parent's: the parent's code (an attention, an MLP) is the model's
own and differs in every architecture, while nn.Linear's is one. So the first of a group to be called (its
leader) computes the one GEMM and hands each sibling its slice, noted in the sibling's slot with the input
it was computed from, as batch norm folding hands a layer's output to its batch norm; a sibling takes its
slice only when it is called on that very input object, unchanged since (its version, checked eagerly:
Dynamo cannot trace a version, so under torch.compile an input changed in place between two projections
is not seen), and runs as it is otherwise. So wherever the fused path did not run (a call with
gradients, training mode, the rewrite off in a mode, PyTorch's own path timed beside ours, a sibling
called on another input), each linear computes what it always did. Dynamo traces the identity tests as
constants: no state of the data enters the graph, and a group whose siblings all run in one graph
leaves no tensor in a slot after it (nothing for CUDA graphs to keep alive between replays).

No weight is copied: the group's weight is one new tensor, and each linear's weight (and bias) is made a
view of its rows, so the model holds no more memory than before and an in-place update of a weight (a
load_state_dict) is seen by the fused GEMM. A weight replaced by another tensor (not updated in place)
breaks the group: eagerly the linear then runs as it is. Files that refuse shared storage (safetensors)
need unconcat_linears first, which gives every weight its own storage back. The outputs are views of the
one GEMM's output, not contiguous: code that merges their last dimension with another by .view fails,
and the check below refuses the rewrite where it does at the given inputs' shapes.

    concat = concat_linears(model, inputs)   # watched forward, then the first fused call checked
    concat.groups, concat.rejected           # LinearGroup: .paths; linear path -> why it is not fused
    concat.eager = False                     # off eagerly (and .compiled under torch.compile)
    unconcat_linears(model)                  # the original forwards and weights back
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.core import patching
from autokernel.routing.outputs import detached_copy, output_error, tolerance

CONCAT_ATTRIBUTE = "_autokernel_linear_concat"


@dataclass
class LinearGroup:
    """Linears called on the same input, their weights views of one fused weight; the first is the leader."""
    paths: list[str]
    linears: list[nn.Linear]
    weight: torch.Tensor                 # [sum of out_features, in_features]
    bias: torch.Tensor | None
    sizes: tuple[int, ...] = ()                         # each linear's out_features: its columns of the output
    addresses: list[tuple] = field(default_factory=list)   # each linear's (weight, bias) view's data pointer
    slots: list = field(default_factory=list)          # per sibling: (input, its version, output slice) or None

    @property
    def label(self) -> str:
        return " + ".join(self.paths)

    def intact(self) -> bool:
        """Every linear still holds the views it was given (eagerly: a weight replaced breaks the group). Read from
        _parameters, where nn.Module keeps them: its __getattr__ costs a GEMM launch's time over a group."""
        return all(_address(linear, "weight") == w and _address(linear, "bias") == b
                   for linear, (w, b) in zip(self.linears, self.addresses))

    def needs_grad(self, x: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (x.requires_grad or any(
            p.requires_grad for linear in self.linears for p in linear.parameters(recurse=False)))


def _address(linear: nn.Linear, name: str) -> int | None:
    parameter = linear._parameters.get(name)
    return None if parameter is None else parameter.data_ptr()


def _fuse(paths: list[str], linears: list[nn.Linear]) -> LinearGroup:
    """One weight (and bias) for the group, each linear's own made a view of its rows: no memory added."""
    with torch.no_grad():
        weight = torch.cat([linear.weight.detach() for linear in linears])
        bias = torch.cat([linear.bias.detach() for linear in linears]) if linears[0].bias is not None else None
        group = LinearGroup(paths, linears, weight, bias, tuple(linear.out_features for linear in linears),
                            slots=[None] * (len(linears) - 1))
        start = 0
        for linear in linears:
            end = start + linear.out_features
            linear.weight.data = weight[start:end]
            if bias is not None:
                linear.bias.data = bias[start:end]
            group.addresses.append((_address(linear, "weight"), _address(linear, "bias")))
            start = end
    # Static as parameters are: under CUDA graphs an input not marked so is copied into the graph's own memory
    # before every replay.
    for tensor in (weight, bias):
        if tensor is not None:
            torch._dynamo.mark_static_address(tensor)
    return group


def _unfuse(group: LinearGroup) -> None:
    """Each linear's weight and bias in storage of its own again (where it still holds the group's views)."""
    with torch.no_grad():
        for linear, addresses in zip(group.linears, group.addresses):
            for name, address in zip(("weight", "bias"), addresses):
                if address is not None and _address(linear, name) == address:
                    parameter = linear._parameters[name]
                    parameter.data = parameter.data.clone()
    group.slots = [None] * len(group.slots)


class LinearConcat:
    """The fused groups of one model, patched into its linears' forwards, each mode on or off (both on at first)."""

    def __init__(self, groups: list[LinearGroup], rejected: dict[str, str],
                 bypassed: Callable[[], bool] = lambda: False):
        # As BatchNormFolding's (autokernel/routing/bn_folding.py): the eager forward traced by Dynamo, where the
        # eager flag holds, and PyTorch's own path timed beside ours, which runs as it is.
        self.eager_trace: Callable[[], bool] = lambda: False
        self.groups = groups
        self.rejected = rejected                  # linear path -> why it is not fused
        self.bypassed = bypassed
        self.eager = self.compiled = True
        self.hits = 0                              # eager calls of a leader that ran the fused GEMM
        self._patches: list[tuple[nn.Module, patching.Run]] = []
        for group in groups:         # their classes swapped, not their forwards patched: few guards when compiled
            leader = group.linears[0]
            self._patches.append((leader, patching.patch(leader, self, "_run_leader", group)))
            for i, linear in enumerate(group.linears[1:]):
                self._patches.append((linear, patching.patch(linear, self, "_run_sibling", group, i)))

    def restore(self) -> None:
        for module, run in reversed(self._patches):
            patching.unpatch(module, run)
        self._patches.clear()
        for group in self.groups:
            _unfuse(group)

    def _applies(self, group: LinearGroup, x) -> bool:
        """Whether this call runs fused: inference only (no gradients, eval mode), in a mode the rewrite is on."""
        compiling = torch.compiler.is_compiling()
        return (isinstance(x, torch.Tensor) and not self.bypassed()
                and (self.compiled if compiling and not self.eager_trace() else self.eager)
                and not any(linear.training for linear in group.linears) and not group.needs_grad(x)
                and (compiling or group.intact()))

    def _run_leader(self, group: LinearGroup, original: Callable, args: tuple, kwargs: dict):
        x = args[0] if len(args) == 1 and not kwargs else None
        if not self._applies(group, x):
            group.slots = [None] * len(group.slots)
            return original(*args, **kwargs)
        parts = F.linear(x, group.weight, group.bias).split(group.sizes, dim=-1)
        version = None if torch.compiler.is_compiling() else x._version     # Dynamo cannot trace a version
        group.slots = [(x, version, part) for part in parts[1:]]
        if not torch.compiler.is_compiling():
            self.hits += 1
        return parts[0]

    def _run_sibling(self, group: LinearGroup, index: int, original: Callable, args: tuple, kwargs: dict):
        x = args[0] if len(args) == 1 and not kwargs else None
        slot = group.slots[index]
        group.slots[index] = None            # taken or stale: a forward's activations must not outlive it
        if slot is not None and x is slot[0] and (torch.compiler.is_compiling() or slot[1] == x._version):
            return slot[2]
        return original(*args, **kwargs)


class _Inputs:
    """The tensors one watched forward's linears read, each numbered once: the same number is the same object."""

    def __init__(self):
        self._seen: dict[int, tuple[weakref.ref, int]] = {}      # id -> (the object, its number)
        self._numbered = 0

    def key(self, x: torch.Tensor) -> tuple:
        """What "the same input" means: the same tensor object, unchanged (version), at the same memory and layout."""
        ref, number = self._seen.get(id(x), (None, None))
        if ref is None or ref() is not x:           # a new object, or a dead one's id reused
            number, self._numbered = self._numbered, self._numbered + 1
            self._seen[id(x)] = (weakref.ref(x), number)
        return number, x._version, x.data_ptr(), tuple(x.shape), tuple(x.stride())


def _linear_problem(linear: nn.Module) -> str:
    """Why this module is not a plain linear whose forward can be taken over ("" when it is)."""
    if "forward" in linear.__dict__ or patching.runs_of(linear):
        return "its forward is patched already (a batch norm folded into it, or a kernel plugged in)"
    if type(linear) is not nn.Linear:
        return f"{type(linear).__name__} is a subclass of nn.Linear: its forward may compute something else"
    if type(linear.weight.data) is not torch.Tensor or not linear.weight.is_floating_point():
        return f"its weight is a {type(linear.weight.data).__name__} of {linear.weight.dtype}, not a plain float tensor"
    return ""


def find_linear_groups(model: nn.Module, run_forward: Callable[[], object]
                       ) -> tuple[list[tuple[list[str], list[nn.Linear]]], dict[str, str], object]:
    """The linears one watched forward shows to read the same inputs (groups of paths and modules, each in the order
    of its first call), why each other linear that shares an input is not grouped, and the forward's output."""
    linears = {path: m for path, m in model.named_modules() if isinstance(m, nn.Linear)}
    calls: dict[str, list[tuple]] = {path: [] for path in linears}
    first_call: dict[str, int] = {}
    inputs = _Inputs()
    odd: dict[str, str] = {}                 # linears called in a way the fused path does not take

    def entered(path, module, args, kwargs):
        first_call.setdefault(path, len(first_call))
        if len(args) != 1 or kwargs or not isinstance(args[0], torch.Tensor):
            odd[path] = "called with other than one positional tensor"
            return
        if args[0].is_nested:       # nn.TransformerEncoder's layers on a padded batch: a nested tensor has no shape
            odd[path] = "called with a nested tensor"
            return
        calls[path].append(inputs.key(args[0]))
    handles = [m.register_forward_pre_hook(functools.partial(entered, path), with_kwargs=True)
               for path, m in linears.items()]
    try:
        output = run_forward()
    finally:
        for handle in handles:
            handle.remove()
    problems = {path: odd.get(path) or _linear_problem(m) for path, m in linears.items()}
    buckets: dict[tuple, list[str]] = {}
    for path in sorted((p for p in linears if calls[p] and not problems[p]), key=first_call.__getitem__):
        m = linears[path]
        key = (tuple(calls[path]), m.weight.dtype, m.weight.device, m.in_features, m.bias is None)
        buckets.setdefault(key, []).append(path)
    grouped = {path for paths in buckets.values() if len(paths) > 1 for path in paths}
    readers: dict[tuple, list[str]] = {}
    for path, keys in calls.items():
        for key in set(keys):
            readers.setdefault(key, []).append(path)
    rejected = {}
    for path in linears:
        siblings = sorted({p for key in set(calls[path]) for p in readers[key] if p != path})
        if siblings and path not in grouped:
            rejected[path] = problems[path] or (
                f"shares an input with {', '.join(siblings)} but not every input, or not their dtype, device, "
                "input width or bias")
    groups = [(paths, [linears[p] for p in paths]) for paths in buckets.values() if len(paths) > 1]
    return groups, rejected, output


def concat_linears(model: nn.Module, inputs, bypassed: Callable[[], bool] = lambda: False) -> LinearConcat:
    """Find the model's linears that read the same input on one forward with `inputs` (a tensor, or the forward's
    arguments; run without gradients), fuse each group into one GEMM, and check the fused forward against the
    model's: a forward that differs by more than the output's tolerance, or raises, is undone, naming why in
    `rejected` (ValueError when the model is in training mode)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    unconcat_linears(model)
    if model.training:
        raise ValueError("linear concatenation is for inference: call model.eval() first")
    with torch.no_grad():
        found, rejected, output = find_linear_groups(model, lambda: model(*inputs))
        expected = detached_copy(output)          # the next forward may reuse the output's memory
        del output                                # one copy of a (large) output held, not two
        groups = []
        try:
            for paths, linears in found:
                groups.append(_fuse(paths, linears))
        except BaseException:               # out of memory for one fused weight: the others' weights back too
            for group in groups:
                _unfuse(group)
            raise
        concat = LinearConcat(groups, rejected, bypassed)
        setattr(model, CONCAT_ATTRIBUTE, concat)
        if concat.groups:
            why = _check(model, inputs, expected)
            if why:
                unconcat_linears(model)
                concat = LinearConcat([], {**rejected, **{p: why for paths, _ in found for p in paths}}, bypassed)
                setattr(model, CONCAT_ATTRIBUTE, concat)
    concat.hits = 0
    return concat


def _check(model: nn.Module, inputs: tuple, expected) -> str:
    """Why the fused forward is not the model's ("" when it matches within the output's tolerance)."""
    try:
        actual = model(*inputs)
    except Exception as exc:          # code after a projection that needs its output contiguous (a .view over it)
        return f"the fused forward raises {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    error, allowed = output_error(expected, actual), tolerance(expected)
    if error <= allowed:
        return ""
    return f"the fused forward differs from the model's by {error:.3g} (tolerance {allowed:g})"


def unconcat_linears(model: nn.Module) -> nn.Module:
    """The forwards concat_linears patched put back, each weight in its own storage (a no-op for a model without
    groups); returns the model."""
    concat = concat_of(model)
    if concat is not None:
        concat.restore()
        delattr(model, CONCAT_ATTRIBUTE)
    return model


def concat_of(model: nn.Module) -> LinearConcat | None:
    return getattr(model, CONCAT_ATTRIBUTE, None)
