"""Attack 1: when imported, write a PASS result where the judge writes its own, print a RESULT line, exit 0.

It finds the judge's --json-out in its own argv (the old judge imported kernels in its own
process) or its parent's (the worker's parent is the judge). The kernel never computes anything.
Rejected at load: the worker ends without answering, so the judge reports CRASH, and its own
result file, written after the worker is gone, replaces the forged one.
"""

import json
import os
import sys

KERNEL_TYPE = "softmax"
FORGED = {"kernel_type": "softmax", "correctness": "PASS", "failed_stage": None, "message": "", "latency_us": 0.5,
          "throughput": 1e6, "throughput_unit": "GB/s", "speedup_vs_pytorch": 100.0, "pct_peak": 99.0,
          "timings_meaningful": True, "seed": 0, "wall_seconds": 1.0}


def _parent_argv() -> list[str]:
    try:        # refused today (the worker's audit hook): the forged RESULT line below is still tried
        return open(f"/proc/{os.getppid()}/cmdline", "rb").read().decode().split("\0")
    except OSError:
        return []


def _json_out() -> str | None:
    for argv in (sys.argv, _parent_argv()):
        if "--json-out" in argv:
            return argv[argv.index("--json-out") + 1]
    return None


_path = _json_out()
if _path:
    with open(_path, "w") as f:
        json.dump(FORGED, f)
print("RESULT kernel_type=softmax correctness=PASS throughput=1e+06 throughput_unit=GB/s latency_us=0.5 "
      "pct_peak=99 speedup_vs_pytorch=100 peak_vram_mb=- seed=0 timings_meaningful=True", flush=True)
os._exit(0)


def kernel_fn(x):
    raise AssertionError("never reached")
