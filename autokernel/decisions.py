"""What the router decides and remembers: a call's signature, the decision for it, the sites and the counts.

A signature is everything a routing decision depends on, hashable, so that the decision is made
once per signature (autokernel/router.py). A Site is one signature of one kernel in the model,
with a copy of its first inputs, for verify to time our kernel against PyTorch there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from autokernel import routes
from autokernel.kernel_ops import OptimizedKernel


@dataclass
class Decision:
    """What calls with one signature do: the kernel and how to launch it, and whether to, eagerly and compiled."""
    kernel: OptimizedKernel | None          # the kernel verified for this call (counted against), or None
    reading: routes.Reading | None
    eager: bool = False
    compiled: bool = False
    why: str = ""                           # why the call is not routed (eagerly), for the fallback count


@dataclass
class Site:
    """One signature of one kernel in the model: where it is called, how often, and a call to time it with."""
    kernel: OptimizedKernel
    shape: dict
    dtype: torch.dtype
    label: str                              # "module layers.0.mlp (SwiGLU)" or the torch function's name
    calls: int = 0                          # per forward pass
    run_ours: Callable | None = None        # the routed call on a copy of its first inputs
    run_pytorch: Callable | None = None     # what PyTorch runs there, on the same inputs
    run_routed: Callable | None = None      # run_ours through the router's decision (its per-call cost added)


@dataclass
class ModuleRoute:
    path: str
    module_class: str
    candidates: list[routes.ModuleVariant]
    checked: routes.ModuleVariant | None = None     # the variant whose first call matched the module's own forward
    rejections: list[str] = field(default_factory=list)
    decisions: dict = field(default_factory=dict)   # signature -> Decision

    @property
    def label(self) -> str:
        return f"module {self.path} ({self.module_class})"


@dataclass
class KernelStats:
    hits: int = 0
    fallbacks: int = 0
    reasons: Counter = field(default_factory=Counter)   # why calls fell back, and how often


def autocast_on() -> bool:
    """Whether autocast is on for any device (older torch releases have no single call for it)."""
    any_enabled = getattr(torch._C, "_is_any_autocast_enabled", None)
    return any_enabled() if any_enabled is not None else torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def _value_signature(value):
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype, value.device, value.requires_grad)
    if isinstance(value, (list, tuple)):
        return tuple(_value_signature(item) for item in value)
    return value


def call_signature(args: tuple, kwargs: dict, autocast: bool | None = None) -> tuple:
    """Everything a routing decision about this call depends on, as a hashable tuple."""
    return (_value_signature(args), tuple((name, _value_signature(v)) for name, v in kwargs.items()),
            torch.is_grad_enabled(), autocast_on() if autocast is None else autocast)


def copy_call(example: tuple) -> tuple[tuple, dict]:
    """A copy of a call's (args, kwargs): its tensors cloned (parameters shared), for timing it later."""
    args, kwargs = example
    return tuple(_copy_value(a) for a in args), {name: _copy_value(v) for name, v in kwargs.items()}


def _copy_value(value):
    if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_value(item) for item in value)
    return value
