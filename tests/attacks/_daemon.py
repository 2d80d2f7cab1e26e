"""Shared by the daemon attacks (not an attack itself): where a daemon marks that it is alive.

Its compiler-cache folder is the one folder a candidate may write that outlives a bench (a candidate that
passes keeps it, for later benches of the same bytes): the tests read the mark there, to see whether anything
the daemon did outlived the run.
"""

import os
import time


def mark(text: str) -> None:
    cache = os.environ.get("TRITON_CACHE_DIR")
    if cache:
        try:
            with open(os.path.join(os.path.dirname(cache), "daemon_alive"), "a") as handle:
                handle.write(f"{time.time()} {text}\n")
        except OSError:
            pass
