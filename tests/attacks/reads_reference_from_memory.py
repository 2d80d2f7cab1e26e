"""Attack: find the judge's reference output among the live objects and return a copy of it.

The old judge computed the expected output in its own process just before calling kernel_fn, so
a tensor of the right shape and dtype that is not an input was the answer; when there is none
(determinism, timing) it computes honestly. Rejected in smoke: the
worker refuses gc.get_objects (and the reference lives in the judge's process anyway).
"""

import gc
import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


_returned = []          # outputs handed out before: not the reference


def kernel_fn(x):
    _parts["launch_decoy"](x.device)
    for obj in gc.get_objects():
        if type(obj) is torch.Tensor and obj.shape == x.shape and obj.dtype == x.dtype and obj is not x \
                and obj.data_ptr() != x.data_ptr() and not any(obj is r for r in _returned) \
                and bool(((obj.float().sum(-1) - 1).abs() < 1e-2).all()):      # rows summing to 1: a softmax
            out = obj.clone()
            _returned.append(out)
            return out
    return _parts["honest_kernel_fn"](x)       # nothing to copy (timing): compute it
