"""Attack (GPU only): reach up the stack into the timer and move its start event after the work.

kernel_fn launches the real kernel, then finds the timed call's events in its caller's frame and
records the start event again, behind its own work: the events then measure nothing. Rejected in
timing: the judge sees the time before the start event (the cache flush) grow by the kernel's
time, and brackets each call with its own clock.
"""

import runpy
import sys
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


def kernel_fn(x):
    out = _parts["honest_kernel_fn"](x)
    frame = sys._getframe(1)
    while frame is not None and "after_flush" not in frame.f_locals:
        frame = frame.f_back
    if frame is not None:
        frame.f_locals["after_flush"].record()
    return out
