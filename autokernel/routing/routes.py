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

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from autokernel.kernel_types import TYPES
from autokernel.kernel_types.base import ModuleVariant, Reading


@dataclass(frozen=True)
class FunctionRoute:
    """A torch function some kernel type can run: how to read a call of it."""
    kernel_type: str
    read: Callable


# torch function -> how to read a call of it (a function belongs to one type at most)
FUNCTION_ROUTES: dict[Callable, FunctionRoute] = {
    func: FunctionRoute(kernel_type.name, read)
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
