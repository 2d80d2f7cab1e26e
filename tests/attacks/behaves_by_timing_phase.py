"""Attack: tell checked calls from timed ones by the judge's global state, and cheat when timed.

Checked calls run with deterministic algorithms on (the judge's poisoned allocations); timed
calls do not, so this kernel returns a stale copy when the flag is off. Rejected in timing: timed
calls are checked too, on fresh inputs.
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_stale = {}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    if not torch.are_deterministic_algorithms_enabled() and key in _stale:
        _parts["launch_decoy"](x.device)
        return _stale[key].clone()
    _stale[key] = _parts["honest_kernel_fn"](x)
    return _stale[key].clone()
