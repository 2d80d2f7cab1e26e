"""The registry of kernel types, read by bench, profile, extract and verify: look a type up by name, and read
and write shapes.

Each type is one module of autokernel/kernel_types/, whose KERNEL_TYPE says everything the tool
needs to know about a kind of kernel (autokernel/kernel_types/base.py lists what). Adding a kernel
type means one module there, one function in references.py and one starter in kernels/, and
nothing else.

A shape is a dict of named sizes, for example {"M": 4096, "N": 4096, "K": 4096}; some types also
carry flags in it (attention's "causal", the MLPs' "act", reduce's "op"). On the command
line it is written "M=4096,N=4096,K=4096".
"""

from __future__ import annotations

import torch

from autokernel.kernel_types import TYPES
from autokernel.kernel_types.base import KernelType, Shape

REGISTRY: dict[str, KernelType] = TYPES


def get(name: str) -> KernelType:
    """A kernel type by name: a menu type, or a region of a model (region_<digest>), read from its file and checked
    against its name (autokernel/kernel_types/regions/store.py)."""
    if name in REGISTRY:
        return REGISTRY[name]
    from autokernel.kernel_types.regions import store

    if store.is_region(name):
        return store.kernel_type(name)
    raise KeyError(f"unknown kernel type {name!r}; known types: {', '.join(REGISTRY)}, and regions (region_...)")


def known(name: str) -> bool:
    """Whether get(name) finds a kernel type: a menu type, or a region whose file is found."""
    from autokernel.kernel_types.regions import store

    return name in REGISTRY or store.is_region(name) and store.find(name) is not None


def parse_shape(text: str) -> Shape:
    """"M=4096,N=11008,act=silu" -> {"M": 4096, "N": 11008, "act": "silu"}."""
    shape: Shape = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ValueError(f"bad shape {text!r}: expected NAME=VALUE pairs separated by commas, like M=4096,N=4096")
        key, value = (s.strip() for s in part.split("=", 1))
        shape[key] = _parse_value(value)
    return shape


def _parse_value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_shape(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
