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


COMPILE_THREADS_VARIABLE = "TORCHINDUCTOR_COMPILE_THREADS"
MIN_POOL = 4    # fewer CPUs than this per run: no compile pool (eight pools of 16 workers: 128 processes, ~60 GiB)


def compile_threads(side_by_side: int) -> str:
    """Inductor's compile workers for one of `side_by_side` runs sharing the machine: its share of the CPUs. Each
    run's sandboxed child otherwise starts a pool of as many workers as the machine has CPUs (about 0.5 GiB each);
    eight such pools side by side would hold 128 processes and ~60 GiB on 16 CPUs, and slow the host side of every
    timing taken meanwhile. A share under MIN_POOL compiles in the run's own process (1 thread)."""
    share = (os.cpu_count() or 1) // max(1, side_by_side)
    return str(share if share >= MIN_POOL else 1)

