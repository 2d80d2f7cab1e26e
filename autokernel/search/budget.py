"""The run's clock, and what one more bench may cost: the budget binds.

A run's time counts from the moment the command starts (profiling included) and carries over
resumes (RunState.elapsed_s). The loop starts nothing the budget left cannot pay for, judged by the
measured duration of this job's benches (or, before the first one, the run's), and it gives a bench
a time limit from that same measure, not the 15-minute ceiling, cut to the budget left: a bench the
budget cuts short is no verdict, it is run again on resume. So a run ends within a bench's kill
grace of its budget.

A job's baseline is its starter benched twice, its stages in the job's dtype alone (`--one-dtype`: the
starter is shipped or made from Inductor's code, and a candidate is judged in every dtype before it is kept);
a bench in n dtypes is expected to cost n times that until one is measured. Before it starts, one run's cost
is estimated (`baseline_run_s`): the last baseline of the same kernel type on this kind of device in
results.tsv (this run's or an earlier one's), else the longest bench of this run so far; with
nothing measured yet it starts, its limit cut to the budget left. Its second run starts only if
the first one's time fits in what is left; otherwise the baseline stands on one run, and says so.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable

from autokernel.core.contracts import PASS, STATUS_BASELINE
from autokernel.core.dtypes import DTYPES

# A bench may take this many times the longest clean bench of its job so far, or this much longer,
# whichever is more (compilation and autotuning vary between candidates), up to --experiment-timeout.
BENCH_LIMIT_FACTOR = 3.0
BENCH_LIMIT_SLACK_S = 30.0
# A baseline that stands on one run (the budget could not pay for a second) says so in its description.
ONE_RUN_BASELINE = "one run"


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


@functools.lru_cache(maxsize=None)
def _judged_dtypes(kernel_type: str) -> int:
    from autokernel.kernel_types import registry

    try:
        kind = registry.get(kernel_type)
    except (KeyError, OSError, ValueError):         # a region whose file is gone: assume the most
        return len(DTYPES)
    return sum(kind.supports(dtype) for dtype in DTYPES.values())


def checked_dtypes(kernel_type: str, *, one_dtype: bool) -> int:
    """How many dtypes a bench's stages check: one with --one-dtype (a baseline, a --screen), else every dtype the
    type is judged in (a region: its model's only)."""
    return 1 if one_dtype else _judged_dtypes(kernel_type)


def bench_limit(typical_s: float | None, ceiling_s: float) -> float:
    """The time limit of a bench whose kind took typical_s before (None: never measured)."""
    if not typical_s:
        return ceiling_s
    return min(ceiling_s, max(BENCH_LIMIT_FACTOR * typical_s, typical_s + BENCH_LIMIT_SLACK_S))


class BenchTimes:
    """How long benches took, by kind: what the next bench is expected to cost and the limit it gets.

    A job's durations live in its progress (JobProgress.bench_seconds, saved for --resume): "quick"
    and "full" are the longest clean bench of each kind, "cold" the first, which compiles every
    shape. While a baseline is measured there is no progress yet, so they are kept here.
    `typical_s` is the longest clean bench of this session, any job: the guess before a job has one.
    """

    def __init__(self):
        self.typical_s: float | None = None
        self.baseline: dict[str, float] = {}
        # The longest user's-process check of this session (autokernel/judge/user_check.py): a candidate that beats
        # the best runs it before it is kept, so any experiment may cost it on top of its bench.
        self.check_s = 0.0

    def of(self, progress) -> dict[str, float]:
        return progress.bench_seconds if progress else self.baseline

    def expected(self, progress, quick: bool, *, dtypes: int = 1) -> float:
        """What a bench of this job is expected to take: its kind's longest so far, else the baseline's (a run in
        one dtype: times `dtypes`, the dtypes this bench checks; the first run's where the baseline stood on it
        alone, which timed torch.compile too: more than a bench costs, not less), else the session's typical bench."""
        seconds = progress.bench_seconds if progress else {}
        measured = seconds.get("quick" if quick else "full") or (quick and seconds.get("full"))
        one_dtype = seconds.get("baseline") or seconds.get("cold") or 0.0
        return measured or dtypes * one_dtype or self.typical_s or 0.0

    def limit(self, progress, quick: bool, ceiling_s: float, left_s: float, *,
              first_baseline: bool = False, dtypes: int = 1) -> tuple[float, bool]:
        """The bench's time limit, and whether the budget left clipped it (then a TIMEOUT means "out of time").

        A job's first baseline run gets the ceiling: it compiles the starter at every shape of the sweep and times
        torch.compile, which other jobs' benches say nothing of (on an H200 a flash_attention starter's took 179 s,
        52 compilations, where the other LLaMA jobs' took 31-88 s, and the 71 s it was given skipped the job). A
        TIMEOUT there loses the whole job, and the file is the job's starter (shipped, or made from Inductor's code
        for a region), not a candidate that may hang. dtypes: how many dtypes this bench's stages check."""
        typical = None if first_baseline else self.expected(progress, quick, dtypes=dtypes)
        limit = bench_limit(typical, ceiling_s)
        # A candidate with new tile sizes compiles every shape from scratch, as only the job's first
        # bench did (the later ones found Triton's cache warm): its limit is at least that first
        # bench's time, in each dtype it checks (the first compiled the job's dtype alone). On an H100 two
        # correct rmsnorm_mlp candidates were killed at 48 s for want of it.
        cold = self.of(progress).get("cold")
        limit = min(ceiling_s, max(limit, dtypes * cold)) if cold else limit
        # The budget binds every bench, measured or not: one that would run past it is cut there.
        clipped = left_s < limit
        return (min(limit, max(left_s, 1.0)) if clipped else limit), clipped

    def check_limit(self, ceiling_s: float, left_s: float) -> tuple[float, bool]:
        """A user's-process check's time limit, and whether the budget left clipped it (as `limit` for a bench)."""
        clipped = left_s < ceiling_s
        return (max(left_s, 1.0) if clipped else ceiling_s), clipped

    def record_check(self, seconds: float | None) -> None:
        """Count a check that ran to a verdict (None: none did)."""
        self.check_s = max(self.check_s, seconds or 0.0)

    def experiment_s(self, llm_s: float, bench_s: float) -> float:
        """What the next experiment may cost: the agent's reply, its bench, and the check a keep runs."""
        return llm_s + bench_s + self.check_s

    def baseline_run_s(self, kernel_type: str, rows: list[dict], *, meaningful: bool) -> float | None:
        """What one baseline run of a job of this type is expected to cost (None: nothing measured yet):
        the last passing baseline of the type in results.tsv (rows) timed on this kind of device (meaningful:
        a GPU's timings, not the interpreter's), a row's time being its runs' (two, or one where it says so);
        else the longest clean bench of this run so far."""
        same = [row for row in rows if row.get("kernel_type") == kernel_type and row.get("status") == STATUS_BASELINE
                and row.get("correctness") == PASS and bool(row.get("timings_meaningful")) == meaningful
                and row.get("wall_seconds")]
        if same:
            last = same[-1]
            return last["wall_seconds"] / (1 if ONE_RUN_BASELINE in (last.get("description") or "") else 2)
        return self.typical_s

    def first_run_s(self, store: dict[str, float]) -> float:
        """The first baseline run's measured time (a job's or a lane's bench_seconds): what a second one costs."""
        return max(store.values(), default=0.0)

    def record(self, progress, seconds: float, *, quick: bool, compare_compile: bool, baseline: bool = False) -> None:
        """Count a bench that ran to a verdict (a hang says nothing of the cost). A run that also timed
        torch.compile, the job's first, is not what later benches cost: it is the floor for limits. A baseline's
        other run (one dtype) is the estimate until the job's own kind of bench is measured."""
        store = self.of(progress)
        if compare_compile:
            store["cold"] = max(store.get("cold", 0.0), seconds)
            return
        kind = "baseline" if baseline else "quick" if quick else "full"
        store[kind] = max(store.get(kind, 0.0), seconds)
        self.typical_s = max(self.typical_s or 0.0, seconds)


# ---------------------------------------------------------------------- the clock across kills
CLOCK_FILE_NAME = "clock.json"
CLOCK_SAVE_S = 2.0       # a kill -9 loses at most this much of the run's clock


class ClockKeeper:
    """Writes the run's clock (time used) to workspace/clock.json every CLOCK_SAVE_S, so a kill -9 loses at most that.

    The state file is saved at each decision, minutes apart on a GPU; without this, each kill charged the
    time since then to nobody (an outside review: 65 s used, 52 s charged, after 5 kills). --resume takes
    the larger of the state's figure and this one (`recovered_elapsed`)."""

    def __init__(self, path: Path, tag: str, budget: Budget):
        self.path, self.tag, self.budget = path, tag, budget
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True, name="autokernel-clock")

    def __enter__(self) -> "ClockKeeper":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=CLOCK_SAVE_S)
        self.save()

    def _keep(self) -> None:
        while not self._stop.wait(CLOCK_SAVE_S):
            self.save()

    def save(self) -> None:
        scratch = self.path.with_suffix(".json.tmp")
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_text(json.dumps({"tag": self.tag, "elapsed_s": round(self.budget.used(), 3)}))
            os.replace(scratch, self.path)


def recovered_elapsed(path: Path, tag: str, saved_s: float) -> float:
    """The time a run had used when it last stopped: its state's figure, or the clock file's if that is later."""
    try:
        clock = json.loads(path.read_text())
    except (OSError, ValueError):
        return saved_s
    if not isinstance(clock, dict) or clock.get("tag") != tag or not isinstance(clock.get("elapsed_s"), (int, float)):
        return saved_s
    return max(saved_s, float(clock["elapsed_s"]))
