"""How much of a run's budget Inductor's autotuning may take while the regions' starters are made.

On a GPU a region that starts with a GEMM or a convolution is compiled with max-autotune (inductor.py): Inductor
times each config of its template, seconds to minutes a region, and the pick (pick.py) judges our GEMM variant
against it (timing every config in Triton's interpreter took 523 s for a 256x256x512 GEMM region, against 4.6 s
with one config: without a GPU a template always takes its first, inductor._first_choice_only). A run's budget counts that time (it is profiling), so the run gives the starters a
share of its budget (`AUTOTUNE_SHARE`, from the run's start): while the time left of that share pays for one more
autotuned starter (the longest one so far, or `FIRST_GUESS_S` before any), the next one is autotuned; after that
a template takes its first config untimed, as without a GPU, and the run says which regions were not autotuned.
The loop searches the same configs afterwards (TUNABLES), so such a starter loses a head start, not a choice.

The run sets the allowance around its planning (`bounded`); outside a run (verify, score, extract alone) there is
none and every starter is autotuned as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from autokernel.core.live import format_duration

# The share of a run's budget that the starters' autotuning may use, counted from the run's start: the rest is
# the loop's, whose experiments search the same configs.
AUTOTUNE_SHARE = 0.25
# What an autotuned starter is taken to cost before one was measured: a GEMM region's template configs on a GPU.
FIRST_GUESS_S = 60.0


@dataclass
class AutotuneAllowance:
    """The time the starters' autotuning may take: until `deadline` on `clock`, one starter's cost at a time."""
    deadline: float
    clock: Callable[[], float] = time.monotonic
    longest_s: float = 0.0                              # the longest autotuned starter so far
    skipped: list[str] = field(default_factory=list)    # the regions whose starters were not autotuned

    def allows(self) -> bool:
        """Whether the time left before the deadline pays for one more autotuned starter."""
        return self.deadline - self.clock() >= (self.longest_s or FIRST_GUESS_S)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Measure one autotuned starter: what the next one is expected to cost."""
        began = self.clock()
        try:
            yield
        finally:
            self.longest_s = max(self.longest_s, self.clock() - began)


_current: contextvars.ContextVar[AutotuneAllowance | None] = contextvars.ContextVar("autotune_allowance",
                                                                                    default=None)


@contextlib.contextmanager
def bounded(allowance: AutotuneAllowance) -> Iterator[AutotuneAllowance]:
    """The starters made inside this block autotune only as long as the allowance pays for it."""
    token = _current.set(allowance)
    try:
        yield allowance
    finally:
        _current.reset(token)


def decide(region_name: str) -> tuple[bool, contextlib.AbstractContextManager]:
    """Whether the region's starter may be autotuned, and the block to make it in (timed when it is).
    Without a run's allowance, always; a region refused is remembered (`AutotuneAllowance.skipped`)."""
    allowance = _current.get()
    if allowance is None:
        return True, contextlib.nullcontext()
    if allowance.allows():
        return True, allowance.timing()
    allowance.skipped.append(region_name)
    return False, contextlib.nullcontext()


def skipped_note(allowance: AutotuneAllowance, budget_s: float) -> str | None:
    """The run's line about the starters it did not autotune, or None when it autotuned every one."""
    if not allowance.skipped:
        return None
    names = ", ".join(allowance.skipped[:5]) + (f" and {len(allowance.skipped) - 5} more" if len(allowance.skipped) > 5
                                                else "")
    return (f"Inductor's autotuning was skipped for {names}: the {AUTOTUNE_SHARE:.0%} of the budget "
            f"({format_duration(budget_s * AUTOTUNE_SHARE)}) that the starters may use could not pay for it; each such "
            f"starter takes its template's first config, and the loop tunes it")

