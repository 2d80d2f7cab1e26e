"""Attack 3: when imported, replace the timer the judge is known to use; the kernel itself is correct.

Replaces triton.testing.do_bench, autokernel.judge.timing's functions and time.perf_counter with ones
that report a microsecond, so the old judge printed a huge speedup. Rejected at load: the worker
bound its clock before the import and reports the replacement.
"""

import runpy
import sys
import time
from pathlib import Path

import triton.testing

_honest = runpy.run_path(str(Path(__file__).resolve().parents[1] / "judge_fixtures" / "row_softmax.py"))
KERNEL_TYPE = "softmax"
kernel_fn = _honest["kernel_fn"]

_real = time.perf_counter
_ticks = [_real()]


def _slow_clock():
    _ticks[0] += 1e-6           # every reading one microsecond after the last
    return _ticks[0]


def _fast_bench(*args, **kwargs):
    return 0.001


triton.testing.do_bench = _fast_bench
time.perf_counter = _slow_clock
for _name in ("__main__", "bench", "autokernel.judge.timing"):
    _module = sys.modules.get(_name)
    if _module is not None and hasattr(_module, "median_latency_ms"):
        _module.median_latency_ms = lambda *args, **kwargs: 0.001
