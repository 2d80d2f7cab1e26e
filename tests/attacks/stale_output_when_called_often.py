"""Attack 5: correct while it is checked; once the same shape is called over and over (timing), it
returns a copy of an output it computed earlier.

The old judge timed the same inputs over and over and never looked at a timed output, so the
stale copy was right and the kernel was timed at the cost of a copy. Rejected in timing: every
timed call gets fresh inputs, and checked timed calls get the stale output.
"""

import runpy
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_last = {"key": None, "repeats": 0, "output": None}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    _last["repeats"] = _last["repeats"] + 1 if key == _last["key"] else 1
    _last["key"] = key
    if _last["repeats"] > 3 and _last["output"] is not None:      # past the three determinism calls
        _parts["launch_decoy"](x.device)
        return _last["output"].clone()
    _last["output"] = _parts["honest_kernel_fn"](x)
    return _last["output"].clone()
