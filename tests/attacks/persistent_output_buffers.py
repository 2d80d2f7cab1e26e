"""Attack: write the result into one of three buffers the kernel keeps per shape, and return that.

No allocation per call, and no fresh tensor: the output of call n is overwritten by call n + 3,
which silently corrupts a model that still holds it. A ring of three passes a check against the
previous output. Rejected in timing: the first timed output is kept and must not change.
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_rings = {}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    ring = _rings.setdefault(key, {"buffers": [torch.empty_like(x) for _ in range(3)], "next": 0})
    out = ring["buffers"][ring["next"]]
    ring["next"] = (ring["next"] + 1) % 3
    out.copy_(_parts["honest_kernel_fn"](x))
    return out
