"""What the router decides and remembers: a call's signature, the decision for it, the sites and the counts.

A signature is everything a routing decision depends on, hashable, so that the decision is made
once per signature (autokernel/routing/router.py). A Site is one signature of one kernel in the model,
with a copy of its first inputs, for verify to time our kernel against PyTorch there. `decide`
makes a decision from a call's Reading, the kernels loaded and the routing policy; the checks a
decision must pass on a real call before it is trusted are here too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from autokernel.core.dtypes import dtype_name
from autokernel.kernel_types import registry
from autokernel.kernel_types.base import ModuleVariant, Reading
from autokernel.routing.kernel_ops import OptimizedKernel
from autokernel.routing.outputs import output_error, tolerance

MEASURED, ALL = "measured", "all"
POLICIES = (MEASURED, ALL)
NOT_MEASURED = "not measured at this shape on this GPU (autokernel verify measures it)"


@dataclass
class Decision:
    """What calls with one signature do: the kernel and how to launch it, and whether to, eagerly and compiled."""
    kernel: OptimizedKernel | None          # the kernel verified for this call (counted against), or None
    reading: Reading | None
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
    candidates: list[ModuleVariant]
    checked: ModuleVariant | None = None     # the variant whose first call matched the module's own forward
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


def copy_fits(example: tuple) -> bool:
    """Whether a copy of a call's tensors, and room to time it, fit in the GPU memory left (always on a CPU): verify
    keeps a copy of each site's first call only where it does, and says so where it does not."""
    args, kwargs = example
    tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter)]
    cuda = [t for t in tensors if t.is_cuda]
    if not cuda:
        return True
    free, _ = torch.cuda.mem_get_info(cuda[0].device)
    return 3 * sum(t.numel() * t.element_size() for t in cuda) < free


def _copy_value(value):
    if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_value(item) for item in value)
    return value


# --------------------------------------------------------------------------- deciding
def decide(kernels: list[OptimizedKernel], policy: str, reading: Reading | str) -> Decision:
    """The decision for one call of a kernel type, given the loaded kernels of the type (made once per signature).

    Under the "measured" policy a call runs our kernel only where its route table says ours was
    measured faster than PyTorch at that signature, eagerly and under torch.compile separately;
    under "all" every verified call does."""
    if isinstance(reading, str):
        return Decision(kernels[0], None, why=reading)
    first = reading.tensors[0]
    dtype = first.dtype
    if torch.is_grad_enabled() and any(t.requires_grad for t in reading.tensors):
        return Decision(kernels[0], None, why="inputs need gradients (the kernels are inference only)")
    if autocast_on():
        return Decision(kernels[0], None, why="autocast is on")
    if any(t.dtype != dtype for t in reading.tensors):
        names = sorted({dtype_name(t.dtype) for t in reading.tensors})
        return Decision(kernels[0], None, why=f"mixed dtypes {names}")
    kernel = next((k for k in kernels if k.covers(reading.shape, dtype)), None)
    if kernel is None:
        if not any(dtype in k.dtypes for k in kernels):
            return Decision(kernels[0], None, why=f"dtype {dtype_name(dtype)} not verified")
        return Decision(kernels[0], None, why=f"shape {registry.format_shape(reading.shape)} not verified")
    if policy == ALL:
        eager = compiled = True
        why = ""
    else:
        record = kernel.record(reading.shape, dtype)
        eager, compiled = (record.route_eager, record.route_compiled) if record else (False, False)
        why = "" if eager else (record.why or "slower than PyTorch here") if record else NOT_MEASURED
    if not reading.traceable:
        compiled = False     # a pair-valued launch cannot run through the kernel's graph op
    return Decision(kernel, reading, eager, compiled, why)


def raised(exc: Exception) -> str:
    return f"the kernel raised {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"


def survives_a_launch(decision: Decision, args: tuple, kwargs: dict) -> Decision:
    """The decision, or a fallback saying why when its kernel raises on this call (a limit it has)."""
    try:
        with torch._C.DisableTorchFunction():
            decision.reading.launch(decision.kernel.kernel_fn, *args, **kwargs)
    except Exception as exc:
        return Decision(decision.kernel, None, why=raised(exc))
    return decision


def first_call_mismatch(decision: Decision, x: torch.Tensor, own_forward: Callable[[], torch.Tensor]) -> str:
    """Why the kernel's result on a module's first call differs from the module's own forward (run only
    after the kernel ran), or "" when it matches."""
    try:
        with torch._C.DisableTorchFunction():
            out = decision.reading.launch(decision.kernel.kernel_fn, x)
    except Exception as exc:       # a kernel outside its limits (a head dim it does not take)
        return raised(exc)
    expected = own_forward()
    error, allowed = output_error(expected, out), tolerance(expected)
    return "" if error <= allowed else f"differs from the module's own forward by {error:.3g} (tolerance {allowed:g})"


def capture_graph_op(kernel: OptimizedKernel, launch: Callable, args: tuple, kwargs: dict) -> None:
    """Give the kernel its graph op (kernel_ops), made from the arguments a real launch passes it."""
    captured = []
    with torch._C.DisableTorchFunction():     # the kernel's own torch calls are never routed
        launch(lambda *kernel_args: captured.append(kernel_args) or kernel.kernel_fn(*kernel_args), *args, **kwargs)
    kernel.graph_op(captured[0] if captured else None)
