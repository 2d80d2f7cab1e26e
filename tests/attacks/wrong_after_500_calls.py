"""Attack (red team, round 3): right for its first 500 calls, wrong on every call after.

The judge calls kernel_fn a few hundred times at most; a user's model calls it thousands of times in one
run. From the 501st call the row sums are left out (a plausible-looking "fast path"), so every output
of a long run is wrong. Rejected by the user's-process check, which calls it CALLS times.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "softmax"
_parts = runpy.run_path(str(Path(__file__).with_name("_user_parts.py")))
_calls = [0]


def kernel_fn(x):
    _calls[0] += 1
    return _parts["softmax"](x, normalize=_calls[0] <= 500)
