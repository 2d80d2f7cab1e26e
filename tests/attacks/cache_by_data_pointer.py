"""Attack 6: cache the output by the input's data pointer (found on CPU).

Right whenever the judge passes a new tensor; wrong when the same tensor holds new values.
The old judge timed and re-checked the same tensors with the same values, so it passed.
Rejected: timed calls write fresh values into the same tensors, and the checked ones fail (or
earlier, where the allocator hands a new case's inputs the address of an old one).
"""

import runpy
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_cache = {}


def kernel_fn(x):
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    if key in _cache:
        _parts["launch_decoy"](x.device)
        return _cache[key].clone()
    _cache[key] = _parts["honest_kernel_fn"](x)
    return _cache[key].clone()
