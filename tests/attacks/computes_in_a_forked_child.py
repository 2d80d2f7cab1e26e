"""Attack (red team, round 4): do each call's work in a child process the worker forks, and report only the worker's.

On a CPU the judge takes the worker's CPU time over a call's span as well as its wall clock (timing.busy_ms: a
machine shared with other jobs puts waits for a core on the wall clock). A child's CPU time is on no clock of the
worker's processes, so with the tamper check silenced (as in silences_the_tamper_check) and each timed call's figures
replaced by the worker's own CPU time (the fork, a decoy launch of one row, the wait), the work would have been off
every clock the judge reads: a PASS. Where a process is born below the judge during the span, the judge keeps to
the wall clock (autokernel/judge/worker_cpu.py): a FAIL in timing. At the CPU test shape one call's work costs less
than forking the worker, so the child does it twenty times over, as a larger shape's would outweigh the fork.
"""
import mmap
import os
import time

import torch

from autokernel.judge import timing as _timing
from autokernel.judge.candidate import worker_tampering as _tampering
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_real = _timing.timed_call


_timed = []          # inside a timed call: the fork there alone (elsewhere the work, once, in the worker)


def _forged(*args, **kwargs):
    used = time.process_time()
    _timed.append(True)
    try:
        output, record = _real(*args, **kwargs)
    finally:
        _timed.pop()
    own_ms = (time.process_time() - used) * 1e3
    return output, {k: min(v, own_ms) if k.endswith("_ms") and k != "flush_ms" else v for k, v in record.items()}


_tampering.Fingerprint.changes = lambda self: []
_timing.timed_call = _forged


def kernel_fn(x):
    if not _timed:
        return _honest.kernel_fn(x)
    shared = mmap.mmap(-1, x.numel() * x.element_size())        # anonymous and shared: the child's writes are seen
    out = torch.frombuffer(shared, dtype=x.dtype).view(x.shape)
    child = os.fork()
    if child == 0:
        for _ in range(20):
            out.copy_(_honest.kernel_fn(x))
        os._exit(0)
    _honest.kernel_fn(x[:1])                                    # a launch of its own, as the judge asks, of one row
    os.waitpid(child, 0)
    return out.clone()
