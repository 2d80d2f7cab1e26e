"""The kernel types, one module each: a module of this package that defines KERNEL_TYPE is a type.

Adding a type means one module here (its registry entry, how the profiler recognises it and how
verify routes it, autokernel/kernel_types/base.py), one function in references.py (reference.py lists it) and one
starter in kernels/, and nothing else: the registry, the profiler's attribution and the router read
every type from TYPES. Helper modules (base, norms, mlps) define no KERNEL_TYPE. The layer's other modules are
not types and are not imported here: the registry (which reads TYPES), the references (reference.py shows them)
and regions/ (a region of a model as a type, read from its file by registry.get).
"""

from __future__ import annotations

import importlib
import pkgutil

from autokernel.kernel_types.base import KernelType


# This layer's modules that are not kernel types (importing the registry here would be a loop).
NOT_TYPES = {"registry", "references", "regions"}


def _discover() -> dict[str, KernelType]:
    types: dict[str, KernelType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name in NOT_TYPES:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        kernel_type = getattr(module, "KERNEL_TYPE", None)
        if kernel_type is None:
            continue
        if kernel_type.name != info.name:
            raise ImportError(f"{module.__name__} defines the kernel type {kernel_type.name!r}: "
                              f"a type's module is named after it")
        types[kernel_type.name] = kernel_type
    return types


# Name -> type, in name order.
TYPES: dict[str, KernelType] = _discover()
