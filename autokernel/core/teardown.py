"""How a sandboxed child of verify's ends once it has answered on its pipe: `answered_exit(code)`.

Python's teardown collects every object a process still holds before it exits. In verify's children (torch,
Triton, Inductor and a compiled model loaded) that is over a second of CPU (issue 37: 1.2 s after one
torch.compile), for objects that die with the process anyway. gc.freeze() would skip it, but Triton's bindings
print a warning for every object of theirs left at the exit. So the child ends as the judge's worker does, with
os._exit, after what an ordinary exit does that matters to it: the atexit handlers (logging's flush,
weakref.finalize's cleanups, Inductor's compile pools) and a flush of stdout and stderr. Its answer went out on its
pipe, written and closed, before this is called; it starts no threads of its own that an exit would wait for.
"""

from __future__ import annotations

import atexit
import os
import sys


def answered_exit(code: int) -> None:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # a closed or broken stream: nothing more can reach it
            pass
    os._exit(code)
