"""The torch-function side of routing (autokernel/routing/router.py): a TorchFunctionMode that sends the torch
functions the router knows to it, and the launch of a kernel outside any such mode."""

from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

NOT_ROUTED = object()           # what Router.run_function returns for a call it leaves to PyTorch


def routing_mode_on_top() -> bool:
    return isinstance(torch.overrides._get_current_function_mode(), FunctionRouting)


def launch_outside_modes(launch: Callable, fn: Callable, x: torch.Tensor):
    # Inside a module whose function calls are routed, the kernel's own torch calls must not be routed.
    if torch._C._is_torch_function_mode_enabled():
        with torch._C.DisableTorchFunction():
            return launch(fn, x)
    return launch(fn, x)


class FunctionRouting(TorchFunctionMode):
    """Sends the torch functions the router knows to it; PyTorch runs whatever it declines."""

    def __init__(self, router):
        super().__init__()
        self.router = router

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not torch.compiler.is_compiling():      # (a counter in a graph would be a guard, and recompile it)
            self.router.intercepted += 1
        if func in self.router.function_routes:
            out = self.router.run_function(func, args, kwargs)
            if out is not NOT_ROUTED:
                return out
        return func(*args, **kwargs)
