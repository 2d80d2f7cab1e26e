"""Batch norm folded into the convolution or linear before it, for inference: a rewrite that keeps the math.

In eval mode a batch norm is an affine map per channel with fixed numbers (its running mean and
variance, weight, bias, eps), so it can be computed once into the weights of the layer that feeds it:

    scale = bn.weight / sqrt(bn.running_var + bn.eps)
    W' = W * scale (per output channel)      b' = (b - bn.running_mean) * scale + bn.bias

and the forward runs the layer with W', b' and no batch norm at all: one pass over the activations
fewer, eagerly. torch.compile's default mode does not make this rewrite (Inductor's pre-grad pass folds
only with `freezing` on, and only on the CPU; on a GPU it computes the batch norm in the pointwise kernel
after the convolution, so compiled, a fold saves little more than that kernel's reads of four vectors).
The sums are made in float64 and rounded once to the layer's dtype, so the folded output differs from the
unfolded one by the rounding of a reassociated sum: within the dtype's tolerance, and checked on the first
call before a fold is trusted.

Where it is sound is found by watching one real forward (autokernel/routing/norm_folding.py, the watch the
norm folds use, with the layer as the producer and its batch norm as the only consumer): the layer's
output must go to its batch norm and nowhere else (not returned, not added to a residual, not read in
place), the batch norm must be fed by that layer on every call, and a layer must feed one batch norm
only. A batch norm in training mode or without running statistics, a transposed or non-zero-padded
convolution, a linear whose output is not (batch, features), or a call that needs gradients, is not
folded: each is dropped with its reason (`rejected`) or runs unfolded on that call.

As the norm folds do, the layer's forward (patched as the router's are: autokernel/core/patching.py)
hands its folded output on, noted as `handed`; the batch norm returns its input unchanged only when it
receives exactly that tensor object, and runs as it is otherwise. So wherever the folded path did not
run (a call with gradients, the model in training mode, the fold turned off for a mode, PyTorch's own
path timed beside ours), the model computes what it always did. Dynamo traces the identity test as a
constant: the same code runs inside torch.compile.

    folding = fold_batch_norms(model, inputs)   # watched forward, then the first folded call checked
    folding.folds, folding.rejected             # BnFold: .layer_path, .norm_path; batch norm path -> why not
    folding.eager = False                       # off eagerly (and .compiled under torch.compile)
    unfold_batch_norms(model)                   # the original forwards back
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from autokernel.core import patching
from autokernel.routing.norm_folding import find_folds
from autokernel.routing.outputs import detached_copy, output_error, tf32_convolution_error, tolerance

FOLDING_ATTRIBUTE = "_autokernel_bn_folding"
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _layer_problem(layer: nn.Module) -> str:
    """Why this layer cannot take a batch norm into its weights ("" when it can)."""
    if isinstance(layer, _CONVS) and layer.padding_mode != "zeros":
        return f"its padding mode is {layer.padding_mode!r} (only zero padding is folded)"
    if not isinstance(layer, (*_CONVS, nn.Linear)):
        return f"{type(layer).__name__} is not a convolution or a linear"
    return ""


def _norm_problem(norm: _BatchNorm) -> str:
    """Why this batch norm is not a fixed affine map per channel ("" when it is)."""
    if norm.training:
        return "it is in training mode: it normalizes by each batch's own statistics"
    if norm.running_mean is None or norm.running_var is None:
        return "it keeps no running statistics (track_running_stats=False): it normalizes by each batch's own"
    return ""


@dataclass
class BnFold:
    """One layer and the batch norm folded into it, with the folded weight and bias (made on first use)."""
    layer_path: str
    layer: nn.Module
    norm_path: str
    norm: _BatchNorm
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    versions: tuple = ()                 # the parameters' versions the folded ones were made from
    handed: torch.Tensor | None = None   # the folded output the layer handed on to its batch norm, until it takes it

    @property
    def label(self) -> str:
        return f"{self.norm_path} into {self.layer_path}"

    def sources(self) -> tuple:
        return tuple(t for t in (self.layer.weight, self.layer.bias, self.norm.weight, self.norm.bias,
                                 self.norm.running_mean, self.norm.running_var) if t is not None)

    @torch.no_grad()
    def folded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W' and b', made again (in place, so a compiled graph holding them sees it) when a source changed."""
        versions = tuple(t._version for t in self.sources())
        if self.weight is None or versions != self.versions:
            weight, bias = folded_parameters(self.layer, self.norm)
            if self.weight is None or self.weight.shape != weight.shape:
                self.weight, self.bias = weight, bias
                # Static as parameters are: under CUDA graphs an input not marked so is copied into the graph's
                # own memory before every replay (a ResNet's every weight, each forward). Made again in place below.
                torch._dynamo.mark_static_address(weight)
                torch._dynamo.mark_static_address(bias)
            else:
                self.weight.copy_(weight)
                self.bias.copy_(bias)
            self.versions = versions
        return self.weight, self.bias


@torch.no_grad()
def folded_parameters(layer: nn.Module, norm: _BatchNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's weight and bias with the eval-mode batch norm after it folded in, in float64 rounded once."""
    w = layer.weight.detach().double()
    out = w.shape[0]
    mean, var = norm.running_mean.detach().double(), norm.running_var.detach().double()
    gamma = norm.weight.detach().double() if norm.weight is not None else torch.ones_like(mean)
    beta = norm.bias.detach().double() if norm.bias is not None else torch.zeros_like(mean)
    if mean.numel() != out:
        raise ValueError(f"the batch norm has {mean.numel()} channels, the layer {out} outputs")
    b = layer.bias.detach().double() if layer.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + norm.eps)
    weight = w * scale.reshape(out, *([1] * (w.dim() - 1)))
    bias = (b - mean) * scale + beta
    return weight.to(layer.weight.dtype), bias.to(layer.weight.dtype)


class BatchNormFolding:
    """The batch norm folds of one model, patched into its forwards, each mode on or off (both on at first)."""

    def __init__(self, folds: list[BnFold], rejected: dict[str, str],
                 bypassed: Callable[[], bool] = lambda: False):
        # eager_trace() says a Dynamo trace is of the eager forward (a plugged-in model's regions routed eagerly
        # run the forward through Dynamo: autokernel/routing/regions/routing.py), where the eager flag holds.
        self.eager_trace: Callable[[], bool] = lambda: False
        self.folds = folds
        self.rejected = rejected                   # layer or batch norm path -> why it is not folded
        self.bypassed = bypassed                   # PyTorch's own path is being run (verify times it beside ours)
        self.eager = self.compiled = True
        self.hits = 0                               # eager calls that ran folded
        self._patches: list[tuple[nn.Module, patching.Run]] = []
        for fold in folds:        # their classes swapped, not their forwards patched: few guards when compiled
            self._patches.append((fold.layer, patching.patch(fold.layer, self, "_run_layer", fold)))
            self._patches.append((fold.norm, patching.patch(fold.norm, self, "_run_norm", fold)))

    def restore(self) -> None:
        for module, run in reversed(self._patches):
            patching.unpatch(module, run)
        self._patches.clear()
        for fold in self.folds:
            fold.handed = None

    def _applies(self, fold: BnFold, x) -> bool:
        """Whether this call runs folded: inference only (no gradients, eval mode), in a mode the fold is on."""
        compiled = torch.compiler.is_compiling() and not self.eager_trace()
        return (isinstance(x, torch.Tensor) and not self.bypassed() and (self.compiled if compiled else self.eager)
                and not fold.norm.training and not (torch.is_grad_enabled() and _needs_grad(fold))
                and (not isinstance(fold.layer, nn.Linear) or x.dim() == 2))

    def _run_layer(self, fold: BnFold, original: Callable, args: tuple, kwargs: dict):
        x = args[0] if len(args) == 1 and not kwargs else None
        if not self._applies(fold, x):
            fold.handed = None
            return original(*args, **kwargs)
        # Made on an eager call (fold_batch_norms checks one); a compiled graph holds them as they are then.
        weight, bias = (fold.weight, fold.bias) if torch.compiler.is_compiling() else fold.folded()
        if weight is None:
            return original(*args, **kwargs)
        if isinstance(fold.layer, nn.Linear):
            out = F.linear(x, weight, bias)
        else:
            out = fold.layer._conv_forward(x, weight, bias)
        fold.handed = out
        return out

    def _run_norm(self, fold: BnFold, original: Callable, args: tuple, kwargs: dict):
        x = args[0] if len(args) == 1 and not kwargs else None
        if x is not None and x is fold.handed:
            fold.handed = None               # a forward's activations must not outlive it
            if not torch.compiler.is_compiling():
                self.hits += 1
            return x
        return original(*args, **kwargs)


def _patched_forward(fold: BnFold) -> bool:
    """Whether something else runs the layer's or the batch norm's forward already: a forward on the instance (which
    would run before the fold), or the router's runs (plugged in before the fold: it would route around it)."""
    return any("forward" in m.__dict__ or patching.runs_of(m) for m in (fold.layer, fold.norm))


def _needs_grad(fold: BnFold) -> bool:
    return any(t.requires_grad for t in fold.sources())


def find_bn_folds(model: nn.Module, run_forward: Callable[[], object]) -> tuple[list[BnFold], dict[str, str], object]:
    """The (layer, batch norm) pairs one watched forward shows to be foldable, why each other batch norm is not
    (by its path), and the forward's output."""
    norms = {path: m for path, m in model.named_modules() if isinstance(m, _BatchNorm)}
    rejected = {path: problem for path, norm in norms.items() if (problem := _norm_problem(norm))}
    foldable_norms = {id(norm) for path, norm in norms.items() if path not in rejected}
    layers = {path: m for path, m in model.named_modules() if isinstance(m, (*_CONVS, nn.Linear))}
    # Which layer's output each batch norm read, so that a layer's reason is told as its batch norm's.
    produced: dict[int, str] = {}
    alive: list[torch.Tensor] = []          # the layers' outputs, kept so that no id is reused in the forward
    fed_by: dict[str, str] = {}
    handles = []

    def layer_returned(path, module, args, output):
        if isinstance(output, torch.Tensor):
            produced[id(output)] = path
            alive.append(output)

    def norm_entered(path, module, args):
        if args and isinstance(args[0], torch.Tensor) and id(args[0]) in produced:
            fed_by.setdefault(path, produced[id(args[0])])
    try:
        for path, layer in layers.items():
            handles.append(layer.register_forward_hook(functools.partial(layer_returned, path)))
        for path, norm in norms.items():
            handles.append(norm.register_forward_pre_hook(functools.partial(norm_entered, path)))
        # The layer is the watch's producer ("norm" in its words) and its batch norm the one consumer.
        search = find_folds(model, run_forward, layers, lambda m: id(m) in foldable_norms, stand_in=False)
    finally:
        for handle in handles:
            handle.remove()
    by_path = dict(model.named_modules())
    folds, taken = [], set()
    for found in search.folds:
        layer_path, layer = found.norm_path, found.norm
        problem = _layer_problem(layer)
        if len(found.consumer_paths) != 1:
            problem = f"its output goes to {len(found.consumer_paths)} batch norms: {', '.join(found.consumer_paths)}"
        for norm_path in found.consumer_paths:
            if problem or norm_path in taken:
                rejected.setdefault(norm_path, f"{layer_path}: {problem or 'another layer feeds it too'}")
        if problem or found.consumer_paths[0] in taken:
            continue
        taken.add(found.consumer_paths[0])
        folds.append(BnFold(layer_path, layer, found.consumer_paths[0], by_path[found.consumer_paths[0]]))
    for path in norms:
        if path not in taken and path not in rejected:
            layer_path = fed_by.get(path)
            why = search.rejected.get(layer_path, "another input feeds it too") if layer_path else None
            rejected[path] = f"{layer_path}: {why}" if why else "no convolution or linear feeds it"
    return folds, rejected, search.output


def fold_batch_norms(model: nn.Module, inputs, bypassed: Callable[[], bool] = lambda: False
                     ) -> BatchNormFolding:
    """Find the model's foldable batch norms on one forward with `inputs` (a tensor, or the forward's arguments;
    run without gradients), fold them into its forwards, and check the folded forward against the unfolded one: a
    mismatch over the output's tolerance unfolds it again, naming why in `rejected` (ValueError when the model is
    in training mode)."""
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    unfold_batch_norms(model)
    if model.training:
        raise ValueError("batch norm folding is for inference: call model.eval() first (in training mode a "
                         "batch norm normalizes by each batch's own statistics)")
    with torch.no_grad():
        folds, rejected, output = find_bn_folds(model, lambda: model(*inputs))
        for fold in [fold for fold in folds if _patched_forward(fold)]:
            folds.remove(fold)     # a forward on the instance runs before its class's: the fold would never run
            rejected[fold.norm_path] = (f"{fold.layer_path}: its forward is patched on the module (autokernel.plug_in "
                                        "before the fold?): fold first, then plug in")
        expected = detached_copy(output)          # the next forward may reuse the output's memory
        own_error = tf32_convolution_error(model, inputs, expected) if folds else 0.0     # still unfolded here
        folding = BatchNormFolding(folds, rejected, bypassed)
        setattr(model, FOLDING_ATTRIBUTE, folding)
        if folds:
            error, allowed = output_error(expected, model(*inputs)), tolerance(expected, own_error)
            if not error <= allowed:
                unfold_batch_norms(model)
                why = f"the folded forward differs from the model's by {error:.3g} (tolerance {allowed:g})"
                folding = BatchNormFolding([], {**rejected, **{f.norm_path: why for f in folds}}, bypassed)
                setattr(model, FOLDING_ATTRIBUTE, folding)
    folding.hits = 0
    return folding


def unfold_batch_norms(model: nn.Module) -> nn.Module:
    """The forwards fold_batch_norms patched put back (a no-op for a model without folds); returns the model."""
    folding = folding_of(model)
    if folding is not None:
        folding.restore()
        delattr(model, FOLDING_ATTRIBUTE)
    return model


def folding_of(model: nn.Module) -> BatchNormFolding | None:
    return getattr(model, FOLDING_ATTRIBUTE, None)
