"""One GPU, several runs side by side: whoever times holds this lock, so that no timing shares the GPU.

benchmarks/suites/zoo.py runs verify on several models at once on one GPU, so that their compilations overlap; each
run's timings (autokernel/verify/latency.py) and the judge's timing stage (a region's pick judges its variants
inside verify) hold the file named by TIMING_LOCK_VARIABLE while they time. Unset, it is a no-op. A process that
cannot open the file (a sandbox that does not show it) times without it: the lock orders timings, it guards nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

TIMING_LOCK_VARIABLE = "AUTOKERNEL_GPU_TIMING_LOCK"
_held = 0


def held() -> bool:
    """Whether this process holds the lock now (or is inside gpu_to_itself where there is none)."""
    return _held > 0


@contextlib.contextmanager
def gpu_to_itself():
    """Hold the GPU timing lock (a no-op unless TIMING_LOCK_VARIABLE names a file it can open); re-entrant."""
    global _held
    path = os.environ.get(TIMING_LOCK_VARIABLE)
    lock = None
    if path and not _held:
        try:
            lock = open(path, "rb")
        except OSError:
            lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        _held += 1
        yield
    finally:
        _held -= 1
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
