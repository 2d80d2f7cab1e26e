"""Routing a norm folded into its consumers: the norm hands its raw input on, each consumer runs the fused kernel.

A fold (autokernel/routing/norm_folding.py) is found by watching the model's first forward with each new
input signature (the router's resolution pass, run unfolded; no extra forward, so a model that
updates a cache in its forward is run once): the norm's output must go only to the consumer
modules. From the next call on, per norm input signature:
  - the first call reads every consumer as the fused type (FoldType.read) and takes the router's
    decision for each (verified shape and dtype, route table, policy); the fold runs only where
    every consumer would run fused, eagerly and under torch.compile separately;
  - before it is trusted, the pair is checked: each consumer's fused result on the raw input
    against the consumer's own forward on the norm's own output; a mismatch turns the fold off;
  - on a folded call the norm returns its input itself, noted as `handed`; a consumer runs the
    fused kernel only when it receives exactly that tensor object, so a normalized tensor is
    never normalized twice, whatever signatures coincide. Dynamo traces the identity test as a
    constant, so the same code runs inside torch.compile, with the kernel's op.
A fold that a later input signature does not confirm (another consumer appeared) is off for good.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from autokernel.kernel_types import TYPES, registry
from autokernel.kernel_types.base import FoldType
from autokernel.routing.decisions import Decision, Site, autocast_on, capture_graph_op, copy_call
from autokernel.routing.norm_folding import Fold, FoldSearch, find_folds
from autokernel.routing.outputs import output_error, tolerance


# Every type that folds a norm into its consumers (KernelType.fold), in order of preference where two
# could fold the same norm (a norm feeding a gated MLP folds into the whole MLP before its linears).
FOLD_TYPES: dict[str, FoldType] = {fold.kernel_type: fold for fold in sorted(
    (kernel_type.fold for kernel_type in TYPES.values() if kernel_type.fold is not None),
    key=lambda fold: fold.preference)}


@dataclass
class FoldDecision:
    consumers: dict[str, Decision]      # consumer path -> its decision
    eager: bool = False
    compiled: bool = False
    why: str = ""


@dataclass
class FoldRoute:
    fold_type: FoldType
    fold: Fold
    decisions: dict = field(default_factory=dict)      # norm input signature -> FoldDecision
    handed: torch.Tensor | None = None                 # the raw input the norm handed on in this forward
    rejected: str = ""                                 # why the fold is off for good; "" while it stands
    checked: bool = False                              # the pair matched the unfolded forward once

    @property
    def label(self) -> str:
        return f"fold {self.fold.norm_path} -> {', '.join(self.fold.consumer_paths)} ({self.fold_type.kernel_type})"


def _declined(consumers: dict[str, Decision], why: str) -> FoldDecision:
    """A decision not to fold, counted against each consumer's kernel (no site: nothing to time)."""
    return FoldDecision({path: Decision(d.kernel, None, why=why) for path, d in consumers.items()}, why=why)


def _key(x: torch.Tensor, compiling: bool) -> tuple:
    return (x.shape, x.stride(), x.dtype, x.device, x.requires_grad, torch.is_grad_enabled(),
            False if compiling else autocast_on())


def search_folds(model: nn.Module, run_forward: Callable[[], object], fold_types: list[FoldType],
                 may_replace: Callable[[nn.Module], bool]) -> tuple[FoldSearch, dict[str, FoldType]]:
    """One watched forward for every fold type at once; each fold gets the first type all its consumers are of."""
    norms = {path: module for path, module in model.named_modules() if any(t.is_norm(module) for t in fold_types)}
    search = find_folds(model, run_forward, norms, lambda m: any(t.is_consumer(m) for t in fold_types), may_replace)
    types, kept = {}, []
    for fold in search.folds:
        fold_type = next((t for t in fold_types if t.is_norm(fold.norm) and all(map(t.is_consumer, fold.consumers))),
                         None)
        if fold_type is None:
            search.rejected[fold.norm_path] = "its consumers are of no single fused type"
        else:
            types[fold.norm_path] = fold_type
            kept.append(fold)
    search.folds = kept
    return search, types


class Folding:
    """The folds of one routed model (one per norm), found on its forwards and run through the router."""

    def __init__(self, router, fold_types: list[FoldType]):
        self.router = router
        self.fold_types = fold_types
        self.routes: dict[str, FoldRoute] = {}         # norm path -> route
        self.searched: dict[str, str] = {}             # norm path -> why not folded, from the last search
        self.watching = False                          # a watched pass runs: nothing is folded meanwhile
        self.counted: set[tuple] = set()               # (norm, consumer, site key) counted in a site's calls

    # ------------------------------------------------------------------ finding folds
    def discover(self, model: nn.Module, run_forward: Callable[[], object]):
        """Run the forward (the router's resolution pass) watched, unfolded; then route the folds it
        shows and turn off for good those it refutes. Returns the forward's output."""
        routed = {route.path for route in self.router.module_routes}
        routed_ids = {id(module) for path, module in model.named_modules() if (path or "(model)") in routed}
        self.watching = True
        try:
            search, fold_types = search_folds(model, run_forward, self.fold_types, lambda m: id(m) in routed_ids)
        finally:
            self.watching = False
        self.searched = dict(search.rejected)
        found = {fold.norm_path: fold for fold in search.folds}
        for path, route in self.routes.items():
            fold = found.get(path)
            if not route.rejected and (fold is None or fold.consumer_paths != route.fold.consumer_paths
                                       or fold_types[path] is not route.fold_type):
                self._reject(route, "not confirmed at a later input signature: "
                             + search.rejected.get(path, "other consumers"))
        for path, fold in found.items():
            if path not in self.routes:
                self._route(FoldRoute(fold_types[path], fold))
        return search.output

    def _route(self, route: FoldRoute) -> None:
        self.routes[route.fold.norm_path] = route
        self.router.patch(route.fold.norm, self, "run_norm", route)
        for path, consumer in zip(route.fold.consumer_paths, route.fold.consumers):
            self.router.patch(consumer, self, "run_consumer", route, path)

    def _reject(self, route: FoldRoute, why: str) -> None:
        route.rejected, route.handed = why, None
        route.decisions.clear()

    def forget(self) -> None:
        for route in self.routes.values():
            route.decisions.clear()
            route.handed = None

    def end_of_forward(self) -> None:
        """Drop the handed tensors (a forward's hidden states must not outlive it)."""
        for route in self.routes.values():
            route.handed = None

    # ------------------------------------------------------------------ running
    def run_norm(self, route: FoldRoute, original: Callable, args: tuple, kwargs: dict):
        if (kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor) or self.router.bypass or route.rejected
                or self.watching):
            return original(*args, **kwargs)
        x = args[0]
        compiling = torch.compiler.is_compiling()
        decision = route.decisions.get(_key(x, compiling))
        if not compiling and decision is None:
            decision = route.decisions[_key(x, False)] = self._resolve(route, original, x)
        if decision is not None and (decision.compiled if compiling else decision.eager) and not route.rejected:
            route.handed = x
            return x
        if not compiling and decision is not None:
            for consumer_decision in decision.consumers.values():
                self.router._count(consumer_decision, hit=False, why=decision.why)
        return original(x)

    def run_consumer(self, route: FoldRoute, path: str, original: Callable, args: tuple, kwargs: dict):
        x = args[0] if len(args) == 1 and not kwargs else None
        if x is None or x is not route.handed or self.router.bypass:
            return original(*args, **kwargs)
        compiling = torch.compiler.is_compiling()
        decision = route.decisions.get(_key(x, compiling))
        if decision is None or not (decision.compiled if compiling else decision.eager):
            # The norm hands its input on only under a decision to fold: this cannot happen.
            raise RuntimeError(f"{route.label}: {path} got the norm's raw input without a decision to fold")
        consumer = decision.consumers[path]
        if compiling:
            return consumer.reading.launch(consumer.kernel.graph_op(), x)
        self.router._count(consumer, hit=True)
        with torch._C.DisableTorchFunction():      # the kernel's own torch calls are never routed
            return consumer.reading.launch(consumer.kernel.kernel_fn, x)

    # ------------------------------------------------------------------ deciding and checking
    def _resolve(self, route: FoldRoute, norm_forward: Callable, x: torch.Tensor) -> FoldDecision:
        fold, kernel_type = route.fold, route.fold_type.kernel_type
        self.router.resolutions[route.label] += 1
        if kernel_type not in self.router.by_type:
            return FoldDecision({}, why=f"no {kernel_type} kernel loaded")
        consumers = {path: self.router.decide(kernel_type, route.fold_type.read(fold.norm, consumer, x), route.label)
                     for path, consumer in zip(fold.consumer_paths, fold.consumers)}
        not_read = next((d.why for d in consumers.values() if d.reading is None), None)
        if not_read is not None:
            return _declined(consumers, not_read)
        with self.router.bypassed():
            normed = norm_forward(x)
        decision = FoldDecision(consumers, eager=all(d.eager for d in consumers.values()),
                                compiled=all(d.compiled for d in consumers.values()))
        if decision.eager or decision.compiled:
            with self.router.bypassed():
                expected = {path: consumer(normed) for path, consumer in zip(fold.consumer_paths, fold.consumers)}
            mismatch = self._pair_mismatch(consumers, expected, x)
            if mismatch:
                self._reject(route, mismatch)
                return _declined(consumers, mismatch)
            route.checked = True
        else:
            decision.why = next(d.why for d in consumers.values() if not d.eager)
        # Every readable signature is a site, routed or not: verify times it there.
        for index, (path, consumer) in enumerate(zip(fold.consumer_paths, fold.consumers)):
            self._adopt(route, path, consumer, consumers[path], x, norm_forward if index == 0 else None, normed)
        return decision

    def _pair_mismatch(self, consumers: dict[str, Decision], expected: dict, x: torch.Tensor) -> str:
        """Why the fused results differ from the unfolded norm and consumers, or "" when they match."""
        for path, decision in consumers.items():
            try:
                with torch._C.DisableTorchFunction():
                    ours = decision.reading.launch(decision.kernel.kernel_fn, x)
            except Exception as exc:     # a kernel outside its limits
                return f"{path}: the kernel raised {type(exc).__name__}: {str(exc).strip()[:160]}"
            error, allowed = output_error(expected[path], ours), tolerance(expected[path])
            if not error <= allowed:
                return (f"{path}: the folded result differs from the norm and {path} by {error:.3g} "
                        f"(tolerance {allowed:g})")
        return ""

    def _adopt(self, route: FoldRoute, path: str, consumer: nn.Module, decision: Decision, x: torch.Tensor,
               norm_forward: Callable | None, normed: torch.Tensor) -> None:
        """Note the consumer's site for verify to time; the norm's time is charged to the first consumer only."""
        kernel, reading = decision.kernel, decision.reading
        key = (kernel.name, registry.format_shape(reading.shape), x.dtype)
        site = self.router.sites.get(key)
        if site is None:
            site = self.router.sites[key] = Site(kernel, dict(reading.shape), x.dtype, f"{route.label}: {path}")
        if (route.fold.norm_path, path, key) not in self.counted:     # calls per forward, once per norm call site
            self.counted.add((route.fold.norm_path, path, key))
            site.calls += 1
        if self.router.keep_examples and site.run_ours is None:
            (raw,), _ = copy_call(((x,), {}))
            (normed_copy,), _ = copy_call(((normed,), {}))
            site.run_ours = lambda: reading.launch(kernel.kernel_fn, raw)
            site.run_pytorch = ((lambda: consumer(norm_forward(raw))) if norm_forward is not None
                                else (lambda: consumer(normed_copy)))
        if decision.compiled and kernel._graph_op is None:
            capture_graph_op(kernel, reading.launch, (x,), {})

    def summary(self) -> list[dict]:
        return [{"norm": path, "consumers": list(route.fold.consumer_paths), "kernel_type": route.fold_type.kernel_type,
                 "checked": route.checked, "rejected": route.rejected or None} for path, route in self.routes.items()]
