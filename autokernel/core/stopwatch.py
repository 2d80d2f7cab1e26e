"""Where a phase's seconds go: its parts timed where they run, summed per name, said in one line of the log.

verify --starters profiles the model and makes its starters before anything is compared, and on the GPU gate that
phase grew session over session with no line saying which part of it grew. `recording()` opens
a stopwatch for a block; code deep inside it (the profiler, the regions' timing, Inductor's codegen, the judge's
pick) wraps its part in `timed(name)`, which adds nothing outside a recording, so profile.py, extract and the loop
pay nothing and pass nothing down.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator


@dataclass
class Stopwatch:
    """Seconds and calls per part (a part timed inside another counts in both: each is said for itself)."""
    clock: Callable[[], float] = time.perf_counter
    seconds: dict[str, float] = field(default_factory=dict)
    calls: Counter = field(default_factory=Counter)

    @contextlib.contextmanager
    def timing(self, name: str) -> Iterator[None]:
        began = self.clock()
        self.seconds.setdefault(name, 0.0)          # in the order the parts began: an outer part before its own
        try:
            yield
        finally:
            self.seconds[name] += self.clock() - began
            self.calls[name] += 1

    def parts(self, names: tuple[str, ...] | None = None) -> str:
        """'torch profiler 4.3 s, region timing 0.6 s (31x)': the parts named (all, in the order first timed, by
        default) that ran, each with its count where it ran more than once."""
        shown = [name for name in (names or self.seconds) if self.calls[name]]
        return ", ".join(f"{name} {self.seconds[name]:.1f} s" + (f" ({self.calls[name]}x)" if self.calls[name] > 1
                                                                  else "") for name in shown)


_current: contextvars.ContextVar[Stopwatch | None] = contextvars.ContextVar("stopwatch", default=None)


@contextlib.contextmanager
def recording(stopwatch: Stopwatch | None = None) -> Iterator[Stopwatch]:
    """The parts timed inside this block (by `timed`) add up in the stopwatch it yields."""
    stopwatch = stopwatch or Stopwatch()
    token = _current.set(stopwatch)
    try:
        yield stopwatch
    finally:
        _current.reset(token)


def timed(name: str) -> contextlib.AbstractContextManager:
    """Time this part in the recording around it, if any."""
    stopwatch = _current.get()
    return stopwatch.timing(name) if stopwatch is not None else contextlib.nullcontext()
