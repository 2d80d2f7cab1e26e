"""A norm folded into the modules that consume its output: which norm feeds which consumers, soundly.

A fused kernel can take a norm's raw input and normalize inside its own GEMM (rmsnorm_linear:
RMSNorm + nn.Linear; rmsnorm_mlp: RMSNorm + a gated MLP). That is only right where the norm's
output goes nowhere else: if anything but the consumers reads it, the normalized tensor must
exist. So the pattern is found by watching one real forward, never by reading module names:

  - a forward hook on each candidate norm notes the tensor object it returns (its output must
    have the input's shape and dtype, so the raw input can stand in for it);
  - a TorchFunctionMode sees every torch function and Tensor method called in the forward; one
    that takes a noted output (anywhere in its arguments) is a use. A use is allowed only inside
    the call of a consumer module (`is_consumer`) that received that output as its input;
    metadata reads (.shape, .dtype, .size()...) are allowed anywhere;
  - the output entering a module that may itself be replaced by another kernel (`may_replace`,
    e.g. a gated MLP that fused_mlp routes) disqualifies the norm: the replacement would get the
    raw input;
  - every call of a consumer must take an output of its norm, and the same norm on every call;
  - an output returned from the forward, or a norm with no consumer at all, is not folded;
  - the norm's input must not change in place (its version counter) before a consumer reads the
    output: folded, the consumer reads that input itself.

What this cannot see: a norm output stored by Python code (an attribute, a cache) and read in a
later forward. The router checks the folded result against the unfolded one on its first call.

The same watch serves a producer that is not a norm (stand_in=False): a convolution or linear whose
batch norm folds into its weights (autokernel/routing/bn_folding.py). Its output need not match its
input, and its input is not handed on, so neither the shape check nor the in-place check applies.

    search = find_folds(model, lambda: model(*inputs), norms, is_consumer, may_replace)
    output = search.output
    for fold in search.folds: fold.norm_path, fold.consumer_paths
    search.rejected     # norm path -> why it is not folded
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from autokernel.core import patching

# Tensor methods and attributes that read metadata only: a use of them is not a use of the values.
_METADATA_METHODS = {torch.Tensor.size, torch.Tensor.dim, torch.Tensor.stride, torch.Tensor.numel,
                     torch.Tensor.is_contiguous, torch.Tensor.__len__, torch.Tensor.element_size,
                     torch.Tensor.get_device, torch.Tensor.is_floating_point}
_METADATA_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "layout", "is_leaf"}


@dataclass(frozen=True)
class Fold:
    """A norm whose every output went only to these consumer modules (in the order first called)."""
    norm_path: str
    norm: nn.Module
    consumer_paths: tuple[str, ...]
    consumers: tuple[nn.Module, ...]


@dataclass
class FoldSearch:
    folds: list[Fold]
    rejected: dict[str, str] = field(default_factory=dict)     # norm path -> why it is not folded
    output: object = None                                      # what the watched forward returned

    def consumer_of(self) -> dict[str, Fold]:
        """Consumer path -> its fold."""
        return {path: fold for fold in self.folds for path in fold.consumer_paths}


def is_metadata_read(func) -> bool:
    if func in _METADATA_METHODS:
        return True
    owner = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__get__" and getattr(owner, "__name__", None) in _METADATA_ATTRIBUTES


_ACTIVE: list["_Search"] = []      # the searches watching a forward now, innermost last


def note_call(func, args: tuple, kwargs: dict) -> None:
    """Check a torch call a mode above the watch handles itself (the router's function routing
    sends a routed call to a kernel): it is a use of a norm output like any other."""
    if _ACTIVE:
        _ACTIVE[-1].call(func, args, kwargs)


class _Watch(TorchFunctionMode):
    """Sees every torch call of the forward and checks each use of a noted norm output."""

    def __init__(self, search: "_Search"):
        super().__init__()
        self.search = search

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.search.call(func, args, kwargs)
        return func(*args, **kwargs)


class _Search:
    def __init__(self, model: nn.Module, norms: dict[str, nn.Module], is_consumer: Callable[[nn.Module], bool],
                 may_replace: Callable[[nn.Module], bool], stand_in: bool = True):
        self.stand_in = stand_in                    # the norm's raw input stands in for its output (module doc)
        self.paths = {id(module): path for path, module in model.named_modules()}
        self.norms = {id(module): path for path, module in norms.items()}
        self.is_consumer, self.may_replace = is_consumer, may_replace
        self.outputs: dict[int, str] = {}           # id of a norm output -> the norm's path
        self.kept: list[torch.Tensor] = []          # the outputs, alive, so that no id is reused
        self.inputs: dict[int, tuple] = {}          # id of a norm output -> (the norm's input, its version then)
        self.inside: list[tuple[int, int]] = []     # (consumer module id, output id) of the consumer calls running
        self.consumers: dict[str, list[str]] = {path: [] for path in norms}
        self.fed_by: dict[str, set[str]] = {}       # consumer path -> the norms that fed it ("": other inputs)
        self.rejected: dict[str, str] = {}
        self.named = dict(model.named_modules())
        self.called: set[str] = set()               # the norms called in the forward

    def reject(self, norm_path: str, why: str) -> None:
        self.rejected.setdefault(norm_path, why)

    def norm_returned(self, module: nn.Module, args: tuple, output) -> None:
        path = self.norms[id(module)]
        x = args[0] if args else None
        if not isinstance(output, torch.Tensor) or not isinstance(x, torch.Tensor) or len(args) != 1:
            self.reject(path, "its call is not one tensor in, one tensor out")
            return
        if self.stand_in and (output.shape != x.shape or output.dtype != x.dtype):
            self.reject(path, "its call is not one tensor in, one tensor of the same shape and dtype out")
            return
        self.called.add(path)
        self.outputs[id(output)] = path
        if self.stand_in:
            self.inputs[id(output)] = (x, x._version)
        self.kept.append(output)

    def module_entered(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        path = self.paths.get(id(module), "")
        first = args[0] if args else None
        feeding = self.outputs.get(id(first)) if isinstance(first, torch.Tensor) else None
        # A consumer called by a consumer on the same output is part of the outer one's computation
        # (a gated MLP's own linears): the outer one is what a fused kernel replaces.
        nested = feeding is not None and any(tensor_id == id(first) for _, tensor_id in self.inside)
        consumer = self.is_consumer(module) and id(module) not in self.norms and not nested
        if consumer:
            # "" stands for any input that is not one norm output alone.
            self.fed_by.setdefault(path, set()).add(feeding if feeding is not None and len(args) == 1
                                                    and not kwargs else "")
            if feeding is not None and path not in self.consumers[feeding]:
                self.consumers[feeding].append(path)
            if feeding is not None and id(first) in self.inputs:
                # Folded, the consumer reads the norm's input itself: it must be as the norm saw it.
                x, version = self.inputs[id(first)]
                if x._version != version:
                    self.reject(feeding, f"its input changed in place before {path} read its output")
        elif feeding is not None and self.may_replace(module) and not nested:
            # Inside a consumer that took this output (an MLP's gate linear), the fused kernel
            # replaces the consumer whole, so what would replace its children never runs.
            self.reject(feeding, f"its output enters {path} ({type(module).__name__}), "
                                 "which another kernel may replace")
        self.inside.append((id(module), id(first) if consumer and feeding is not None else -1))

    def _in_consumer_of(self, output_id: int) -> bool:
        return any(tensor_id == output_id for _, tensor_id in self.inside)

    def module_left(self) -> None:
        self.inside.pop()

    def call(self, func, args: tuple, kwargs: dict) -> None:
        if not is_metadata_read(func):
            for leaf in tree_leaves((args, kwargs)):
                if isinstance(leaf, torch.Tensor) and id(leaf) in self.outputs:
                    self.use(id(leaf), func)

    def use(self, output_id: int, func) -> None:
        if self._in_consumer_of(output_id):
            return
        name = getattr(func, "__name__", repr(func))
        self.reject(self.outputs[output_id], f"its output is used by {name} outside a consumer")

    def result(self, returned) -> FoldSearch:
        for leaf in tree_leaves(returned):
            if isinstance(leaf, torch.Tensor) and id(leaf) in self.outputs:
                self.reject(self.outputs[id(leaf)], "its output is returned from the forward")
        by_path = self.named
        folds = []
        for norm_path, consumer_paths in self.consumers.items():
            if norm_path in self.rejected:
                continue
            mixed = [path for path in consumer_paths if self.fed_by[path] != {norm_path}]
            if mixed:
                self.reject(norm_path, f"its consumer {mixed[0]} also takes other inputs")
                continue
            if not consumer_paths:
                if norm_path in self.called:
                    self.reject(norm_path, "its output goes to no consumer")
                continue
            folds.append(Fold(norm_path, by_path[norm_path], tuple(consumer_paths),
                              tuple(by_path[path] for path in consumer_paths)))
        return FoldSearch(folds, dict(self.rejected))


def find_folds(model: nn.Module, run_forward: Callable[[], object], norms: dict[str, nn.Module],
               is_consumer: Callable[[nn.Module], bool],
               may_replace: Callable[[nn.Module], bool] = lambda module: False, stand_in: bool = True) -> FoldSearch:
    """Run one forward (run_forward(), the caller's real one: its output is kept in the result) and find
    which of `norms` (path -> module) fold into their consumers. The watch sits below any
    TorchFunctionMode run_forward pushes: such a mode must pass each call it handles on to PyTorch
    or to a kernel launch whose own torch calls (a reshape of its inputs) the watch then sees."""
    search = _Search(model, norms, is_consumer, may_replace, stand_in)
    handles = []
    norm_ids = {id(module) for module in norms.values()}
    _ACTIVE.append(search)      # before anything can raise: the finally takes it off
    try:
        for _, module in patching.hookable_modules(model):
            handles.append(module.register_forward_pre_hook(search.module_entered, with_kwargs=True))
            handles.append(module.register_forward_hook(lambda *_: search.module_left(), always_call=True))
            if id(module) in norm_ids:
                handles.append(module.register_forward_hook(search.norm_returned))
        with _Watch(search):
            returned = run_forward()
    finally:
        _ACTIVE.remove(search)
        for handle in handles:
            handle.remove()
    result = search.result(returned)
    result.output = returned
    return result
