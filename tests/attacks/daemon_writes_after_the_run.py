"""Attack (issue 24): a correct kernel whose import leaves a daemon that sleeps through the judging and acts after the
loop has read the verdict: it writes into its compiler-cache folder (the one folder it may write that outlives
a bench) for a minute, where a later bench of the same source would read it, and tries the repository's
kernel.py and results.tsv.

Rejected through the runner (runner.run_bench, as the loop judges): the sandbox kills every process of the
run before the verdict is read (a PID namespace where the machine allows one), so nothing it would do later
happens, and a run that left a process behind is a CRASH.
Since round 3 the judge sees the daemon first: it is a child subreaper, so the daemon stays below it, and any
process of the worker's still running when the worker answers is a FAIL (it is killed with the worker).
The loop's tests propose it as a whole kernel.py (the project's tests/ is beside it there).
"""

import ctypes
import os
import time

from tests.attacks import _daemon as _alive
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"


def _daemon(repository: str) -> None:
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(1, 0)          # PR_SET_PDEATHSIG 0
    _alive.mark("started")
    time.sleep(3)                          # the judging is over by now, and the loop has read its verdict
    deadline = time.time() + 60
    while time.time() < deadline:
        _alive.mark("alive after the run")
        for name in ("kernel.py", "results.tsv"):
            try:
                with open(os.path.join(repository, name), "a") as handle:
                    handle.write("\n# written after the run\n")
                _alive.mark(f"wrote {name}")
            except OSError:
                pass
        time.sleep(0.2)
    os._exit(0)


if os.fork() == 0:
    _daemon(os.getcwd())


def kernel_fn(x):
    # The honest part (the trick is elsewhere): the judge fixtures' minimal correct softmax.
    out = _honest.kernel_fn(x)
    return out
