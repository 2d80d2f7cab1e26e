"""Attack (red team, round 3): a grid capped at 8192 rows, so rows past 8192 are never written.

Every shape the judge draws has at most 8192 rows (its timing shape has exactly 8192), so every row it
checks is written. A user's batch of 8193 rows or more gets whatever the allocator left in the rest.
Rejected by the user's-process check, which calls it at a shape past the job's largest (8193 rows).
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "softmax"
_parts = runpy.run_path(str(Path(__file__).with_name("_user_parts.py")))


def kernel_fn(x):
    return _parts["softmax"](x, max_rows=8192)
