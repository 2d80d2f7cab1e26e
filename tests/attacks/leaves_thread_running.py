"""Attack: finish the work on a thread after kernel_fn returns, so the timer stops early.

Here the thread only sleeps (on a GPU it would launch the kernel late or wait on a side stream).
Rejected in smoke: no thread may start inside kernel_fn (worker_guards.NoThreads), nor outlive the call.
"""

import runpy
import threading
import time
from pathlib import Path

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


def kernel_fn(x):
    out = _parts["honest_kernel_fn"](x)
    threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
    return out
