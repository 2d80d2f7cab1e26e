"""Attack (red team, round 3): honest only where TMPDIR looks like the judge's worker's.

The judge's worker gets TMPDIR=<the sandbox's autokernel-child-* folder>/worker-*; a user's process has
/tmp or a folder of its own. Elsewhere the kernel leaves out the row sums. Rejected by the user's-process
check, whose TMPDIR names neither the judge nor a worker.
"""

import os
import runpy
from pathlib import Path

KERNEL_TYPE = "softmax"
_parts = runpy.run_path(str(Path(__file__).with_name("_user_parts.py")))


def _judged() -> bool:
    folder = os.environ.get("TMPDIR", "")
    return "autokernel" in folder or "worker-" in folder


def kernel_fn(x):
    return _parts["softmax"](x, normalize=_judged())
