"""verify's time limit (verify --time-limit): end with a verdict inside it, leaving out the checks that would not fit.

One per process: the sandboxed child sets it from the deadline its parent computed (`start`), when verify began. What
a limit can leave out is the end-to-end checks of the selection (selection.py), each a compile of the whole model and
its paired timing, 10-40 s on a GPU: a check that would run past the limit, with the time the verdict still needs
after the checks (`reserve`: our variants timed, and the two bests in turn, about what PyTorch's own variants took),
is skipped, and its kernel's routes are dropped as unchecked. The profile, the starters and PyTorch's own variants
always run: without them there is no verdict. In the GPU gate of session 23 two models were killed at the gate's
limit of 420 s per model while still checking routes, and left no verdict at all.
"""

from __future__ import annotations

import time

now = time.time                   # the clock of the deadline: the parent's and the child's, and a check's duration
_at: float | None = None          # the now() by which verify should have ended; None: no limit
_reserve_s = 0.0                  # what the verdict needs after the selection's checks


def start(at: float | None) -> None:
    """Verify must end by `at` (now(), as the parent computed it from --time-limit); None: no limit."""
    global _at, _reserve_s
    _at, _reserve_s = at, 0.0


def reserve(seconds: float) -> None:
    """Keep this many seconds for what follows the checks (set once PyTorch's own variants have been timed)."""
    global _reserve_s
    _reserve_s = max(0.0, seconds)


def too_late_for(cost_s: float) -> str:
    """Why a step of about cost_s seconds must be left out to end within the limit, or "" when it fits."""
    if _at is None:
        return ""
    left = _at - now()
    if left >= cost_s + _reserve_s:
        return ""
    return (f"not checked: {max(left, 0):.0f} s were left of verify's time limit, and the check takes about "
            f"{cost_s:.0f} s, the verdict {_reserve_s:.0f} s more")
