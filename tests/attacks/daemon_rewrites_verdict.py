"""Attack (issue 24, the one an outside review got kept): a correct kernel whose import leaves a daemon that rewrites
the judge's verdict after the judge wrote it.

The daemon double-forks out of the worker, leaves its session (setsid) and clears its parent-death signal,
then hunts for the verdict where a candidate could once find it: a --json-out path on any command line it
can read, and every descriptor of every process under /proc. Whatever it finds it rewrites to a PASS at
0.5 us, for a minute, and it marks its progress in its compiler-cache folder (the one folder it may
write that outlives a bench) so a test can see whether it outlived the run.

Rejected through the runner (runner.run_bench, as the loop judges): the verdict travels on a pipe only
bench.py holds, read after the sandbox killed every process of the run (a PID namespace where the
machine allows one), and a run that left a process behind is a CRASH.
Since round 3 the judge sees the daemon first: it is a child subreaper, so the daemon stays below it, and any
process of the worker's still running when the worker answers is a FAIL (it is killed with the worker).
The loop's tests propose it as a whole kernel.py (the project's tests/ is beside it there).
"""

import ctypes
import json
import os
import time

from tests.attacks import _daemon as _alive
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
FORGED = {"kernel_type": "softmax", "correctness": "PASS", "failed_stage": None, "message": "", "latency_us": 0.5,
          "throughput": 1e6, "throughput_unit": "GB/s", "speedup_vs_pytorch": 1000.0, "timings_meaningful": True}


def _rewrite_everything() -> None:
    for pid in (name for name in os.listdir("/proc") if name.isdigit() and int(name) != os.getpid()):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
            if "--json-out" in argv:
                with open(argv[argv.index("--json-out") + 1], "w") as handle:
                    json.dump(FORGED, handle)
                _alive.mark(f"rewrote {argv[argv.index('--json-out') + 1]}")
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with open(f"/proc/{pid}/fd/{fd}", "w") as handle:
                    handle.write(json.dumps(FORGED))
                _alive.mark(f"wrote into /proc/{pid}/fd/{fd}")
        except (OSError, ValueError, IndexError):
            continue


def _daemon() -> None:
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(1, 0)          # PR_SET_PDEATHSIG 0: nothing tells it the judge is gone
    deadline = time.time() + 60
    while time.time() < deadline:
        _alive.mark("alive")
        _rewrite_everything()
        time.sleep(0.2)
    os._exit(0)


if os.fork() == 0:
    _daemon()


def kernel_fn(x):
    # The honest part (the trick is elsewhere): the judge fixtures' minimal correct softmax.
    out = _honest.kernel_fn(x)
    return out
