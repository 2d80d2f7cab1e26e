"""Attack: look at the call stack, and when called from a timing loop return a stale copy.

Rejected in timing: checked calls are timed calls, made through the same code, so the stack
cannot tell them apart, and the stale copy is wrong for the fresh inputs every timed call gets.
"""

import runpy
import sys
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_stale = {}


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if "tim" in frame.f_code.co_name or "bench" in frame.f_code.co_name:
            return True
        frame = frame.f_back
    return False


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    if _timed() and key in _stale:
        _parts["launch_decoy"](x.device)
        return _stale[key].clone()
    _stale[key] = _parts["honest_kernel_fn"](x)
    return _stale[key].clone()
