"""A child's output as the runner reads it: only the tail is kept, and each line may be watched as it comes.

A kernel printing in a loop must not fill the loop's memory, nor block on a full pipe; the tail is
what explains a crash. The live view watches the judge's lines to show which stage it is in.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Callable

# Kept per stream; a kernel printing in a loop must not fill the loop's memory. The tail is what matters.
OUTPUT_LIMIT_BYTES = 256 * 1024

# Lines the child prints, passed as they come to whoever watches (the live view shows the judge's stage).
_line_watcher: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("line_watcher",
                                                                                           default=None)


@contextlib.contextmanager
def watch_output(callback: Callable[[str], None]):
    """Within this block, every line a child prints (stdout or stderr) is also passed to callback."""
    token = _line_watcher.set(callback)
    try:
        yield
    finally:
        _line_watcher.reset(token)


class TailReader(threading.Thread):
    """Drains one pipe so the child never blocks on a full pipe, keeping only the last bytes."""

    def __init__(self, stream, on_line: Callable[[str], None] | None = None):
        super().__init__(daemon=True)
        self.stream = stream
        self.kept = bytearray()
        self.dropped = 0
        self.on_line = on_line
        self._partial = b""

    def run(self) -> None:
        while chunk := self.stream.read1(65536):
            self.kept += chunk
            if len(self.kept) > OUTPUT_LIMIT_BYTES:
                excess = len(self.kept) - OUTPUT_LIMIT_BYTES
                del self.kept[:excess]
                self.dropped += excess
            if self.on_line is not None:
                *lines, self._partial = (self._partial + chunk).split(b"\n")
                self._partial = self._partial[-4096:]
                for line in lines:
                    with contextlib.suppress(Exception):      # a watcher's bug must not stop the draining
                        self.on_line(line.decode("utf-8", errors="replace"))
        self.stream.close()

    def text(self) -> str:
        body = self.kept.decode("utf-8", errors="replace")
        return f"[... {self.dropped} bytes of output dropped ...]\n{body}" if self.dropped else body


def current_watcher() -> Callable[[str], None] | None:
    """The callback of the innermost watch_output block, if any."""
    return _line_watcher.get()
