"""Attack (red team, round 3): writes each result, once more, into the caller's input of two calls earlier.

The judge checks that a call leaves its own inputs alone, and its timed calls reuse one input tensor,
which this kernel never touches; it drops its inputs once a call is checked. A user's model still holds
the activations of two layers ago (a residual), and finds them overwritten. Rejected by the user's-process
check, which holds every input, as a model does, and compares them with their copies after every call.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "softmax"
_parts = runpy.run_path(str(Path(__file__).with_name("_user_parts.py")))
_earlier = []


def kernel_fn(x):
    y = _parts["softmax"](x)
    if len(_earlier) >= 2:
        old = _earlier[-2]
        if old.shape == x.shape and old.dtype == x.dtype and old.data_ptr() != x.data_ptr() and old.is_contiguous():
            _parts["softmax"](x, out=old)          # the result again, into a tensor the caller gave two calls ago
    _earlier.append(x)
    del _earlier[:-2]
    return y
