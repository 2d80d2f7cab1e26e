"""The run's clock, and what one more bench may cost: the budget binds.

A run's time counts from the moment the command starts (profiling included) and carries over
resumes (RunState.elapsed_s). The loop starts nothing the budget left cannot pay for, judged by the
measured duration of this job's benches (or, before the first one, the run's), and it gives a bench
a time limit from that same measure, not the 15-minute ceiling. So a run ends at most one bench
limit past its budget, and only when a bench runs far longer than the ones before it.
"""

from __future__ import annotations

import time
from typing import Callable

# A bench may take this many times the longest clean bench of its job so far, or this much longer,
# whichever is more (compilation and autotuning vary between candidates), up to --experiment-timeout.
BENCH_LIMIT_FACTOR = 3.0
BENCH_LIMIT_SLACK_S = 30.0


class Budget:
    def __init__(self, total_s: float, *, used_before_s: float = 0.0, started: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.total_s = total_s
        self.clock = clock
        self._used_before = used_before_s
        self._started = clock() if started is None else started

    def used(self) -> float:
        return self._used_before + self.clock() - self._started

    def left(self) -> float:
        return self.total_s - self.used()

    def deadline(self) -> float:
        """The clock reading at which the budget is spent."""
        return self.clock() + self.left()


def bench_limit(typical_s: float | None, ceiling_s: float) -> float:
    """The time limit of a bench whose kind took typical_s before (None: never measured)."""
    if not typical_s:
        return ceiling_s
    return min(ceiling_s, max(BENCH_LIMIT_FACTOR * typical_s, typical_s + BENCH_LIMIT_SLACK_S))
