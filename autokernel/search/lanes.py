"""The jobs in flight side by side with several GPUs: what each one is doing, and how the live view shows them.

A lane is one job of the plan that the parallel loop (autokernel/search/parallel_loop.py) has opened: first
its baseline (the starter's two bench runs, one at a time), then its candidates, several at once,
each on a worker of its own, asked of the agent one at a time (autokernel/search/proposals.py), until its
stopping rule fires and the last of them, and the agent's reply being waited for, is back. The
loop keeps one lane per job in flight, in plan order; this module holds their records, not the
decisions (the loop's), so the schedule reads in one place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autokernel.agents.base import Proposal
from autokernel.core.contracts import TIMEOUT, BenchResult, Job
from autokernel.core.run_records import JobProgress
from autokernel.judge import user_check


@dataclass
class Flight:
    """A candidate being judged: what it is, when it was asked for, what it cost, and its limits' origin."""
    proposal: Proposal
    description: str
    started: float
    clipped: bool           # its limit was cut to the budget left: a TIMEOUT then means "out of time"
    check_limit_s: float | None = None    # its user's-process check's limit: cut by the budget if below its ceiling

    def cut_by_budget(self, result: BenchResult) -> str | None:
        """What the budget cut short ("judged", "checked in a user's process"), or None: a TIMEOUT under a limit it
        cut is no verdict."""
        in_check = result.failed_stage == user_check.STAGE
        check_cut = self.check_limit_s is not None and self.check_limit_s < user_check.TIMEOUT_S
        if result.correctness != TIMEOUT or not (check_cut if in_check else self.clipped):
            return None
        return "checked in a user's process" if in_check else "judged"

    def not_recorded(self, cut: str) -> str:
        """The line for a verdict the budget cut short (cut: what cut_by_budget says it cut)."""
        return f"{self.description}: not finished, the budget ran out while it was {cut}; not recorded"


@dataclass
class Lane:
    """A job in flight: its baseline's runs until they are in, then its candidates being judged."""
    index: int                                   # its place in the plan (RunState.jobs)
    job: Job
    progress: JobProgress | None = None          # once its baseline passed (a resumed job starts with it)
    source: str = ""                             # the starter, judged as the baseline and committed as it
    started: float = field(default_factory=time.monotonic)   # when its baseline was asked for
    runs: list[BenchResult] = field(default_factory=list)    # the baseline runs back so far
    first_slot: int | None = None                # the worker that judged the first run, and its GPU
    first_gpu: str = ""
    baseline_slot: int | None = None             # the worker judging a baseline run now
    baseline_clipped: bool = False
    # The baseline's benches by kind, as JobProgress.bench_seconds holds a job's (BenchTimes reads and writes it).
    bench_seconds: dict[str, float] = field(default_factory=dict)
    flights: dict[int, Flight] = field(default_factory=dict)  # candidates being judged, by worker slot
    waiting: bool = False                        # its agent waits for one of them before it proposes more
    asking: bool = False                         # its agent's reply for the next candidate is being waited for
    stop: str | None = None                      # why it starts nothing more: it ends once nothing is in flight

    @property
    def busy(self) -> bool:
        return bool(self.flights) or self.baseline_slot is not None or self.asking

    def doing(self, labels: list[str]) -> str:
        """What it is doing, on which GPUs: "baseline run 1 of 2 on gpu1", "2 candidates on gpu0, gpu1",
        "waiting on the agent" (for its next candidate)."""
        if self.baseline_slot is not None:
            text = f"baseline run {len(self.runs) + 1} of 2 on {labels[self.baseline_slot]}"
        elif self.flights:
            count = len(self.flights)
            text = (f"{count} candidate{'s' if count > 1 else ''} on "
                    + ", ".join(labels[slot] for slot in sorted(self.flights))
                    + (", waiting on the agent for the next" if self.asking else ""))
        elif self.asking:
            text = "waiting on the agent"
        else:
            text = "waiting for a GPU"
        return text + (f", then it ends ({self.stop})" if self.stop else "")


def lanes_line(lanes: list[Lane], labels: list[str]) -> str:
    """The jobs in flight for the live view: "1_softmax: 2 candidates on gpu0, gpu1; 2_reduce: baseline run 1 ..."."""
    return "; ".join(f"{lane.job.name}: {lane.doing(labels)}" for lane in lanes) or "-"
