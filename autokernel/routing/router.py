"""Decides, once per call signature, whether a torch call or a module runs an optimized kernel; then just runs it.

A signature is what a decision depends on: the shapes, strides, dtypes and devices of a call's
tensors, its other arguments, and whether gradients or autocast are on. The first call with a
signature reads it (autokernel/routing/routes.py), picks the kernel verified at its shape and dtype, and
looks up the kernel's route table (autokernel/routing/manifest.py): under the "measured" policy a call
runs our kernel only where it was measured faster than PyTorch at that signature, eagerly and
under torch.compile separately; under "all" every verified call does (for checks and overhead
measurements). The decision is cached; every later call with that signature costs one dictionary
lookup and the launch.

Where the calls are made:
  - modules a kernel replaces (linears, norms, gated MLPs, rotary modules) get a patched forward;
  - torch functions (SDPA, softmax, matmul...) are intercepted by a TorchFunctionMode, but only
    inside the modules whose own code called a routed function in the model's first forward with
    that input signature (the "resolution pass", which runs with the mode over the whole model);
    every other torch call in the model goes straight to PyTorch.
Inside torch.compile the same code is traced by Dynamo: the cached decisions are constants there,
and a routed call becomes the kernel's op (autokernel/routing/kernel_ops.py), so routing adds no graph
break. Counting (hits, fallbacks and why) happens in eager calls only.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Callable

import torch
from torch import nn

from autokernel.core import patching
from autokernel.kernel_types import registry
from autokernel.kernel_types.base import Reading
from autokernel.kernel_types.regions import store
from autokernel.routing import routes
from autokernel.routing.decisions import (MEASURED, POLICIES, Decision, KernelStats, ModuleRoute, Site, autocast_on,
                                           call_signature, capture_graph_op, copy_call, copy_fits, decide,
                                           first_call_mismatch, survives_a_launch)
from autokernel.routing.fold_routing import FOLD_TYPES, Folding
from autokernel.routing.kernel_ops import OptimizedKernel
from autokernel.routing.norm_folding import note_call
from autokernel.routing.function_mode import (NOT_ROUTED, FunctionRouting, launch_outside_modes,
                                              routing_mode_on_top)
from autokernel.routing.regions.routing import RegionRouting

class Router:
    """The routing of one plugged-in model: its kernels, the cached decisions, and the counts."""

    def __init__(self, kernels: list[OptimizedKernel], policy: str = MEASURED, keep_examples: bool = False):
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; use one of {POLICIES}")
        self.kernels = kernels
        self.policy = policy
        self.keep_examples = keep_examples          # verify times each site on a copy of its first inputs
        self.by_type: dict[str, list[OptimizedKernel]] = {}
        for kernel in kernels:
            self.by_type.setdefault(kernel.kernel_type, []).append(kernel)
        self.function_routes = {func: route for func, route in routes.FUNCTION_ROUTES.items()
                                if route.kernel_type in self.by_type}
        self.module_routes: list[ModuleRoute] = []
        self.function_decisions: dict = {}
        self.model_signatures: set = set()
        self.scoped_modules: dict[str, nn.Module] = {}      # path -> module whose own code calls routed functions
        self.sites: dict[tuple, Site] = {}
        self.resolutions: Counter = Counter()               # decisions made, per route label
        self.recording = False                              # inside a resolution pass
        self.bypass = False                                 # PyTorch runs everything (to time or check it)
        self.intercepted = 0                                # torch calls the function routing has seen
        self._scope_depth = 0                               # scoped modules being run (eagerly) now
        self._module_stack: list[tuple[str, nn.Module]] = []
        self._pass_calls: Counter = Counter()
        self._scopes_patched: set[str] = set()
        # (module, the run patched on, whether torch.compile must trace it: None for always), in order
        self.patches: list[tuple[nn.Module, patching.Run, Callable[[], bool] | None]] = []
        # Norms folded into their consumers (rmsnorm_mlp, rmsnorm_linear), found on each new model input signature.
        fold_types = [fold_type for kernel_type, fold_type in FOLD_TYPES.items() if kernel_type in self.by_type]
        self.folding = Folding(self, fold_types) if fold_types else None
        # Regions of the model's graph (autokernel/routing/regions/routing.py): routed in the graph, not by module or
        # function.
        self.regions = RegionRouting(self, kernels) if any(store.is_region(k.kernel_type) for k in kernels) else None
        self.reset_stats()

    # ------------------------------------------------------------------ state
    @contextlib.contextmanager
    def bypassed(self):
        """PyTorch runs every call meanwhile: the routed modules' own forwards and the torch functions as they are."""
        before, self.bypass = self.bypass, True
        try:
            yield
        finally:
            self.bypass = before

    def release_examples(self) -> None:
        """Drop the copies of each site's first call once they are timed: the memory goes to the variants after."""
        for site in self.sites.values():
            site.run_ours = site.run_pytorch = site.run_routed = None

    def reset_stats(self) -> None:
        self.stats = {kernel.name: KernelStats() for kernel in self.kernels}

    def set_policy(self, policy: str) -> None:
        """Route by another policy from the next call on (every decision is made again)."""
        if policy not in POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}; use one of {POLICIES}")
        self.policy = policy
        self.forget_decisions()

    def forget_decisions(self) -> None:
        for route in self.module_routes:
            route.decisions.clear()
        self.function_decisions.clear()
        self.model_signatures.clear()
        if self.folding is not None:
            self.folding.forget()
        if self.regions is not None:
            self.regions.forget()
        self.retrace()

    # ------------------------------------------------------------------ deciding
    def decide(self, kernel_type: str, reading: Reading | str, site_label: str) -> Decision:
        """The decision for one call of a kernel type (made once per signature)."""
        return decide(self.by_type[kernel_type], self.policy, reading)

    def _adopt(self, decision: Decision, site_label: str, example: tuple, original: Callable,
               through_router: Callable) -> None:
        """After a decision is made on a real call: note its site, pick its graph op, keep an example."""
        kernel, reading = decision.kernel, decision.reading
        if reading is None:
            return
        dtype = reading.tensors[0].dtype
        key = (kernel.name, registry.format_shape(reading.shape), dtype)
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = Site(kernel, dict(reading.shape), dtype, site_label)
        if self.keep_examples and site.run_ours is None and copy_fits(example):
            args, kwargs = copy_call(example)
            site.run_ours = lambda: reading.launch(kernel.kernel_fn, *args, **kwargs)
            site.run_pytorch = lambda: original(*args, **kwargs)     # run it under bypassed()
            site.run_routed = lambda: through_router(args, kwargs)
        if decision.compiled and kernel._graph_op is None:
            capture_graph_op(kernel, reading.launch, *example)

    # ------------------------------------------------------------------ counting
    def _count(self, decision: Decision, hit: bool, why: str = "") -> None:
        if decision.kernel is None:
            return
        stats = self.stats[decision.kernel.name]
        if hit:
            stats.hits += 1
        else:
            stats.fallbacks += 1
            stats.reasons[why or decision.why] += 1
        if self.recording and decision.reading is not None:
            key = (decision.kernel.name, registry.format_shape(decision.reading.shape),
                   decision.reading.tensors[0].dtype)
            self._pass_calls[key] += 1

    # ------------------------------------------------------------------ module calls
    def run_module(self, route: ModuleRoute, original: Callable, args: tuple, kwargs: dict):
        """One call of a routed module: its kernel when the decision for this signature says so, else its own forward."""
        if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor) or self.bypass:
            return original(*args, **kwargs)
        x = args[0]
        if torch.compiler.is_compiling():
            # Traced once per graph: the decision made eagerly for this signature (autocast off in a graph).
            decision = route.decisions.get((x.shape, x.stride(), x.dtype, x.device, x.requires_grad,
                                            torch.is_grad_enabled(), False))
            if decision is not None and decision.compiled:
                return decision.reading.launch(decision.kernel.graph_op(), x)
            return original(x)
        if (self._scope_depth or self.recording) and routing_mode_on_top():
            # A routed module's own code is outside any function routing: its torch calls are its own
            # computation (a linear's F.linear), decided here once, not again call by call.
            with torch.overrides._pop_mode_temporarily():
                return self._run_module_eagerly(route, original, x)
        return self._run_module_eagerly(route, original, x)

    def _run_module_eagerly(self, route: ModuleRoute, original: Callable, x: torch.Tensor):
        key = (x.shape, x.stride(), x.dtype, x.device, x.requires_grad, torch.is_grad_enabled(), autocast_on())
        decision = route.decisions.get(key)
        if decision is None:
            decision = route.decisions[key] = self._resolve_module(route, original, x)
            if decision.compiled:
                self.retrace()
        if decision.eager:
            self._count(decision, hit=True)
            return launch_outside_modes(decision.reading.launch, decision.kernel.kernel_fn, x)
        self._count(decision, hit=False)
        return original(x)

    def _resolve_module(self, route: ModuleRoute, original: Callable, x: torch.Tensor) -> Decision:
        self.resolutions[route.label] += 1
        fallback = None
        for variant in [route.checked] if route.checked else list(route.candidates):
            decision = self.decide(variant.kernel_type, variant.read(x), route.label)
            if decision.reading is None:
                fallback = fallback or decision
                continue
            routed = decision.eager or decision.compiled
            if routed and variant.needs_check and route.checked is None:
                with self.bypassed():
                    mismatch = first_call_mismatch(decision, x, lambda: original(x))
                if mismatch:      # a variant whose kernel does not compute what the module does is dropped
                    route.candidates.remove(variant)
                    route.rejections.append(f"{variant.label}: {mismatch}")
                    continue
                route.checked = variant
            elif routed:
                decision = survives_a_launch(decision, (x,), {})
                if decision.reading is None:
                    return decision
            self._adopt(decision, route.label, ((x,), {}), original,
                        lambda args, kwargs: self.run_module(route, original, args, kwargs))
            return decision
        return fallback or Decision(None, None)

    # ------------------------------------------------------------------ function calls
    def run_function(self, func: Callable, args: tuple, kwargs: dict):
        """The kernel's result for one routed torch function call, or NOT_ROUTED to let PyTorch run it."""
        if self.bypass:
            return NOT_ROUTED
        if self.recording and self.folding is not None:
            note_call(func, args, kwargs)       # the fold search watches what this mode takes from it
        compiling = torch.compiler.is_compiling()
        try:     # inside a graph autocast is off: the decision made eagerly for this signature
            key = (func, call_signature(*routes.canonical_call(self.function_routes[func], args, kwargs),
                                        autocast=False if compiling else None))
            decision = self.function_decisions.get(key)
        except TypeError:        # an unhashable argument: decide for this call alone
            key, decision = None, None
        if compiling:
            if decision is not None and decision.compiled:
                return decision.reading.launch(decision.kernel.graph_op(), *args, **kwargs)
            return NOT_ROUTED
        if decision is None:
            decision = self._resolve_function(func, args, kwargs)
            if key is not None:
                self.function_decisions[key] = decision
                if decision.compiled:
                    self.retrace()
        if self.recording and (decision.eager or decision.compiled) and self._module_stack:
            path, module = self._module_stack[-1]
            self.scoped_modules.setdefault(path, module)
        if decision.eager:
            self._count(decision, hit=True)
            return decision.reading.launch(decision.kernel.kernel_fn, *args, **kwargs)
        self._count(decision, hit=False)
        return NOT_ROUTED

    def _resolve_function(self, func: Callable, args: tuple, kwargs: dict) -> Decision:
        label = routes.function_name(func)
        self.resolutions[label] += 1
        kernel_type, reading = routes.read_function_call(func, args, kwargs)
        decision = self.decide(kernel_type, reading, label)
        if decision.eager or decision.compiled:
            decision = survives_a_launch(decision, args, kwargs)
        if decision.reading is not None:
            self._adopt(decision, label, (args, kwargs), func,
                        lambda args, kwargs: self.run_function(func, args, kwargs))
        return decision

    # ------------------------------------------------------------------ the model's forward
    def run_model(self, model: nn.Module, original: Callable, args: tuple, kwargs: dict):
        """The model's forward: a resolution pass for a new input signature, else the forward with scoped routing."""
        try:
            if torch.compiler.is_compiling():
                return self.run_scoped("", original, args, kwargs)
            try:
                key = call_signature(args, kwargs)
                known = key in self.model_signatures
            except TypeError:
                key, known = None, False
            if known:
                return self.run_scoped("", original, args, kwargs)
            if self.folding is not None:
                # The pass is watched for norms that feed only their consumers (folded from the next call on).
                output = self.folding.discover(model, lambda: self._resolution_pass(model, original, args, kwargs))
            else:
                output = self._resolution_pass(model, original, args, kwargs)
            if key is not None:
                self.model_signatures.add(key)
            self._patch_new_scopes()
            return output
        finally:
            if self.folding is not None:
                self.folding.end_of_forward()

    def run_scoped(self, path: str, original: Callable, args: tuple, kwargs: dict):
        """A module's own forward, with the function routing on when its own code calls routed functions."""
        if path in self.scoped_modules and torch.compiler.is_compiling():
            with FunctionRouting(self):
                return original(*args, **kwargs)
        if path in self.scoped_modules and not self.recording:
            self._scope_depth += 1
            try:
                with FunctionRouting(self):
                    return original(*args, **kwargs)
            finally:
                self._scope_depth -= 1
        return original(*args, **kwargs)

    def _resolution_pass(self, model: nn.Module, original: Callable, args: tuple, kwargs: dict):
        handles = []
        for path, module in patching.hookable_modules(model):
            handles.append(module.register_forward_pre_hook(
                lambda m, a, path=path: self._module_stack.append((path, m))))
            handles.append(module.register_forward_hook(lambda m, a, o: self._leave_module()))
        self.recording, self._module_stack, self._pass_calls = True, [("", model)], Counter()
        try:
            with FunctionRouting(self):
                output = original(*args, **kwargs)
        finally:
            self.recording = False
            for handle in handles:
                handle.remove()
        for key, calls in self._pass_calls.items():
            self.sites[key].calls = max(self.sites[key].calls, calls)
        return output

    # ------------------------------------------------------------------ patching forwards
    def patch(self, module: nn.Module, owner, method: str, *data, traced: Callable[[], bool] | None = None) -> None:
        """module's forward becomes owner.method(*data, its current forward, args, kwargs) (autokernel/core/
        patching.py: its class is swapped, not its forward patched on the instance, so that a compiled model's guards
        stay few). traced() says whether the run can change a compiled forward now: where it cannot, Dynamo does not
        trace it (no guards on it); retrace() asks again whenever a decision it reads changes."""
        run = patching.patch(module, owner, method, *data)
        self.patches.append((module, run, traced))
        if traced is not None:
            patching.set_traced(module, run, traced())

    def retrace(self) -> None:
        """The runs a compiled forward traces, after the decisions changed (a compiled graph guards on the change)."""
        for module, run, traced in self.patches:
            if traced is not None:
                patching.set_traced(module, run, traced())

    # When each of the router's runs can change a compiled forward, read from what it reads while compiling
    # (run_module, run_scoped, run_model; RegionRouting.routes_compiled): only through a decision to route compiled.
    # Exact, or conservative: an untraced run that would have routed a call compiles PyTorch's forward in its place.
    def module_route_traced(self, route: ModuleRoute) -> bool:
        return any(decision.compiled for decision in route.decisions.values())

    def functions_traced(self) -> bool:
        return any(decision.compiled for decision in self.function_decisions.values())

    def model_traced(self) -> bool:
        """The model's own run: its own scope's function routing, and the norm folds' end of each forward."""
        return self.folding is not None or ("" in self.scoped_modules and self.functions_traced())

    def restore(self) -> None:
        """Take off every run patch() put on, last first."""
        for module, run, _ in reversed(self.patches):
            patching.unpatch(module, run)
        self.patches.clear()

    def _patch_new_scopes(self) -> None:
        for path, module in self.scoped_modules.items():
            if path and path not in self._scopes_patched:
                self._scopes_patched.add(path)
                self.patch(module, self, "run_scoped", path, traced=self.functions_traced)
        self.retrace()         # the model's own run follows its scope

    def _leave_module(self) -> None:
        self._module_stack.pop()     # (a forward hook's return value would replace the module's output)

    # ------------------------------------------------------------------ reporting
    def summary(self) -> dict:
        """Hits, fallbacks and their reasons per kernel, the module routes and the resolutions, as plain data."""
        return {
            "kernels": [{"name": k.name, "kernel_type": k.kernel_type, "file": str(k.file),
                         "hits": self.stats[k.name].hits, "fallbacks": self.stats[k.name].fallbacks,
                         "fallback_reasons": dict(self.stats[k.name].reasons.most_common()),
                         "graph_op": k.op_kind or None, "variant": k.variant} for k in self.kernels],
            "module_routes": [{"path": r.path, "class": r.module_class,
                               "routed_as": r.checked.label if r.checked else None,
                               "candidates": [v.label for v in r.candidates], "rejections": r.rejections}
                              for r in self.module_routes],
            "scoped_modules": sorted(self.scoped_modules),
            "folds": self.folding.summary() if self.folding is not None else [],
            "regions": self.regions.summary() if self.regions is not None else [],
            "resolutions": dict(self.resolutions),
            "policy": self.policy,
        }
