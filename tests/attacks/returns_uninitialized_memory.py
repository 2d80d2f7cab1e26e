"""Attack: compute nothing and return fresh, unwritten memory, hoping the allocator hands back a
block that still holds the reference's (or the last call's) result.

Rejected in smoke: checked calls poison fresh allocations with NaN (and the reference is never
computed in the worker's process at all).
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


def kernel_fn(x):
    _parts["launch_decoy"](x.device)
    return torch.empty_like(x)
