"""Attack: return a lazy tensor subclass that computes the answer only when someone reads it.

kernel_fn does no work of its own in the timed region; the values appear (via PyTorch) when the
judge copies the output. Rejected in smoke: outputs must be plain torch.Tensor objects.
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


class LazySoftmax(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        args = [torch.softmax(a.as_subclass(torch.Tensor), -1) if isinstance(a, LazySoftmax) else a for a in args]
        return func(*args, **(kwargs or {}))


def kernel_fn(x):
    _parts["launch_decoy"](x.device)
    return x.clone().as_subclass(LazySoftmax)
