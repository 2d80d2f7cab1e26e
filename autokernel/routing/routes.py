"""Reads torch calls and modules as kernel calls: the registry shape of each, and how to launch a kernel for it.

A reader looks at one call and returns a Reading, or a string saying why the call cannot run as a
kernel. Reading happens once per input signature (autokernel/routing/router.py caches the decision); what
runs on every later call is the Reading's `launch`, which takes the kernel (or its op) and the
call's own arguments, so a cached decision never holds on to one call's tensors. The shape dict is
built exactly as the profiler builds it, so a call matches the shapes a kernel was verified at.

Each kernel type says what it reads (KernelType.route, in autokernel/kernel_types/<type>.py):
  - the torch functions it runs (FUNCTION_ROUTES gathers them: F.linear, softmax, SDPA...);
  - the modules it could replace (module_variants asks every loaded type): what a norm, MLP or
    rotary module computes is inferred from its structure, so the router checks its first
    routed call against the module's own forward.
Kernel arguments are made contiguous: bench.py verified the kernels on contiguous inputs only.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.kernel_types import TYPES
from autokernel.kernel_types.base import ModuleVariant, Reading


@dataclass(frozen=True)
class FunctionRoute:
    """A torch function some kernel type can run: how to read a call of it; its parameters' names and defaults."""
    kernel_type: str
    read: Callable
    names: tuple = ()            # a Python-level function's parameters, in order (none for a builtin)
    defaults: dict = field(default_factory=dict)


def function_route(kernel_type: str, func: Callable, read: Callable) -> FunctionRoute:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):      # a builtin: its routing mode sees its calls as written, eagerly or traced
        return FunctionRoute(kernel_type, read)
    return FunctionRoute(kernel_type, read, tuple(p.name for p in parameters),
                         {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty})


def canonical_call(route: FunctionRoute, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """One call in one form, whichever way it reached the routing mode: every named argument by name, those that
    hold their default left out. Eagerly a Python-level torch function hands the mode its own form
    (F.cross_entropy(x, t): x and t, and weight=None ... label_smoothing=0.0 by name; F.layer_norm its weight and
    bias by name); under Dynamo the mode sees the call as written. Keyed on the raw calls, the decisions made
    eagerly were never found in a compiled graph, and no such route ran there (session 18)."""
    if not route.names:          # a builtin (torch.softmax, torch.matmul): already one form, and a hot path
        return args, kwargs
    given = dict(zip(route.names, args))
    given.update(kwargs)
    named = {name: given[name] for name in route.names if name in given}       # in the parameters' order
    named.update((name, value) for name, value in given.items() if name not in named)
    return args[len(route.names):], {name: value for name, value in named.items()
                                     if not _is_default(value, route.defaults.get(name, inspect.Parameter.empty))}


def _is_default(value, default) -> bool:
    """None, or a number, string or bool equal to the parameter's default (never a tensor's comparison)."""
    return value is default or (type(value) is type(default) and type(value) in (int, float, str, bool)
                                and value == default)


# torch function -> how to read a call of it (a function belongs to one type at most)
FUNCTION_ROUTES: dict[Callable, FunctionRoute] = {
    func: function_route(kernel_type.name, func, read)
    for kernel_type in TYPES.values() for func, read in kernel_type.route.functions.items()}


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


def module_variants(module: nn.Module, verified_shapes: dict[str, list[dict]]) -> list[ModuleVariant]:
    """The ways this module could run as one of the loaded kernel types (type -> the shapes verified), in the
    order they are tried: by rank, ties in registry order."""
    variants = [variant for name, shapes in verified_shapes.items()
                if name in TYPES and TYPES[name].route.module_variants is not None
                for variant in TYPES[name].route.module_variants(module, shapes)]
    order = list(TYPES)
    return sorted(variants, key=lambda variant: (variant.rank, order.index(variant.kernel_type)))


def forget_kept_tensors(model: nn.Module) -> None:
    """Drop the tensors the launches keep on the model's modules (transposed weights, rotary tables; plugin.unplug)."""
    kept = [name for kernel_type in TYPES.values() for name in kernel_type.route.kept_attributes]
    for module in model.modules():
        for name in kept:
            module.__dict__.pop(name, None)
