"""Attack: once called over and over (timing), return a stale copy on every other call.

Half the timed calls are nearly free, which moves the median; a judge that checks only the last
timed call, or a few at random, lets it through half of the time or more. Rejected in timing:
every timed call is checked, a random sample of its elements if not the whole output.
"""

import runpy
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_state = {"key": None, "repeats": 0, "output": None}


def kernel_fn(x):
    key = (tuple(x.shape), x.dtype)
    _state["repeats"] = _state["repeats"] + 1 if key == _state["key"] else 1
    _state["key"] = key
    if _state["repeats"] > 3 and _state["repeats"] % 2 == 0 and _state["output"] is not None:
        _parts["launch_decoy"](x.device)
        return _state["output"].clone()
    _state["output"] = _parts["honest_kernel_fn"](x)
    return _state["output"].clone()
