"""Signals for the loop: Ctrl-C, SIGTERM and SIGHUP become one exception, held back inside critical sections.

An interruption between "commit" and "record" would leave a commit no state knows about, so the
loop's write sequences run as critical sections and a signal that arrives inside one is raised at
its end. SIGHUP (a closed terminal or SSH session) is handled exactly like SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP; `signum` says which (the exit code is 128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


class InterruptGuard:
    """Turns SIGINT, SIGTERM and SIGHUP into Interrupted, and holds them back inside critical sections."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self._depth = 0
        self._pending: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self._depth:
            self._pending = self._pending or signum
        else:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def critical(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                signum, self._pending = self._pending, None
                raise Interrupted(signum)
