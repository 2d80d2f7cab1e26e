"""Starting the candidate's worker process, early: this module imports nothing heavy.

bench.py calls start_early before its own imports, so the worker imports torch, Triton and the
kernel file while the judge imports its own (each takes about two seconds). The worker gets one
end of a socket pair as an inherited file descriptor and nothing else of the judge's: not its
environment's result nonce, which the judge takes out first, and not its memory or /proc entries,
closed by PR_SET_DUMPABLE. autokernel/judge_link.py talks to the worker once it is started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

# runner.run_bench puts a fresh secret here; the judge takes it out before it starts the worker and writes it
# into its JSON result, so a result file that a kernel wrote (it can find the path) is told apart.
NONCE_VARIABLE = "AUTOKERNEL_RESULT_NONCE"
# The worker decides itself whether Triton runs interpreted (the one switch, first): it may start
# before the judge knows.
WORKER_CODE = ("import sys, torch\n"
               "from autokernel import interpreter\n"
               "if interpreter.choose():\n"
               "    torch.set_num_threads(1)\n"
               "from autokernel.worker import main\n"
               "sys.exit(main())\n")

_sealed: dict = {}
_early: dict = {}


def seal_judge() -> str | None:
    """Take the result nonce out of the environment, and close this process to the worker (idempotent).

    Without PR_SET_DUMPABLE a process of the same user can read this one's /proc entries (its
    initial environment, which held the nonce) and memory, or attach a debugger to it.
    """
    if "nonce" not in _sealed:
        _sealed["nonce"] = os.environ.pop(NONCE_VARIABLE, None)
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE, 0
    return _sealed["nonce"]


def start_worker(kernel_path: Path) -> tuple[subprocess.Popen, socket.socket]:
    """The worker process for kernel_path, and the judge's end of its socket pair."""
    seal_judge()
    judge_end, worker_end = socket.socketpair()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}   # the kernel's prints arrive as they happen
    cmd = [sys.executable, "-c", WORKER_CODE, "--fd", str(worker_end.fileno()), "--kernel", str(kernel_path),
           "--parent", str(os.getpid())]
    proc = subprocess.Popen(cmd, pass_fds=(worker_end.fileno(),), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    worker_end.close()
    return proc, judge_end


def start_early(argv: list[str]) -> None:
    """Start the worker for the --kernel in bench.py's arguments now, if that file exists."""
    path = Path("kernel.py")
    for i, arg in enumerate(argv):
        if arg == "--kernel" and i + 1 < len(argv):
            path = Path(argv[i + 1])
        elif arg.startswith("--kernel="):
            path = Path(arg.split("=", 1)[1])
    if path.is_file():
        _early[path.resolve()] = start_worker(path)


def started_for(kernel_path: Path) -> tuple[subprocess.Popen, socket.socket]:
    """The worker started early for kernel_path, or a new one."""
    return _early.pop(kernel_path.resolve(), None) or start_worker(kernel_path)
