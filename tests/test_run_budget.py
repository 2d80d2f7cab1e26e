"""The budget binds from the run's start: profiling and the starters' autotuning count against --budget, and the run
says what its time went to (autokernel/search/session.py, autokernel/profile/regions/autotune_budget.py)."""

import re
import time

import pytest

from autokernel.core import contracts
from autokernel.core.contracts import RunSettings
from autokernel.core.live import ProgressView
from autokernel.core.run_records import BASELINES, EXPERIMENTS, PROFILING
from autokernel.profile.regions import autotune_budget
from autokernel.search import loop, results, session
from autokernel.search.loop_records import is_run_stop
from tests.loop_helpers import TableAgent, fake_run_bench, make_job, make_project, proposal, result, source


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    monkeypatch.setattr(session, "make_agent", lambda *args, **kwargs: TableAgent(
        [proposal("faster", source(result(60.0))), proposal("wrong", source(result(1.0, "FAIL")))]))
    return root


def _run(project, plan, *, budget_s: float, started: float, lines: list[str]):
    view = ProgressView(interactive=False)
    view.log = lines.append
    return session.run_optimization(plan=plan, settings=RunSettings(budget_s=budget_s), tag="night", view=view,
                                    started=started)


def test_the_starters_autotune_within_a_share_of_the_budget_counted_from_the_runs_start(project):
    seen = []

    def plan(log):
        seen.append(autotune_budget._current.get())
        return [make_job(project, 1, source(result(100.0)))]

    started = time.monotonic() - 5.0          # the command started 5 s before the session
    lines: list[str] = []
    state = _run(project, plan, budget_s=400.0, started=started, lines=lines)
    [allowance] = seen
    assert allowance.deadline == pytest.approx(started + 400.0 * autotune_budget.AUTOTUNE_SHARE)
    assert autotune_budget._current.get() is None, "the allowance ends with the planning"
    assert state.done and any(line.startswith("profiling and the starters took") for line in lines)


def test_the_run_says_what_its_time_went_to(project):
    lines: list[str] = []
    state = _run(project, lambda log: [make_job(project, 1, source(result(100.0)))], budget_s=400.0,
                 started=time.monotonic(), lines=lines)
    rows = results.read_rows(project / "results.tsv")
    judged = {kind: sum(row["wall_seconds"] for row in rows if (row["status"] == contracts.STATUS_BASELINE) ==
                        (kind == BASELINES)) for kind in (BASELINES, EXPERIMENTS)}
    assert {row["status"] for row in rows} > {contracts.STATUS_BASELINE}, "baselines and experiments both ran"
    assert state.spent_s[BASELINES] == pytest.approx(judged[BASELINES], abs=0.02)
    assert state.spent_s[EXPERIMENTS] == pytest.approx(judged[EXPERIMENTS], abs=0.02)
    assert state.spent_s[PROFILING] >= 0
    assert re.search(r"of 6m40s used \(profiling \d+m\d\ds, baselines \d+m\d\ds, experiments \d+m\d\ds\), ",
                     session.outcome_lines(state)[0])


def test_a_profile_that_spent_the_budget_leaves_no_baseline_started(project):
    # The budget counts from the command's start: a profile that took it all (here, 100 s before the session
    # began, on a 60 s budget) leaves the loop nothing to start.
    lines: list[str] = []
    state = _run(project, lambda log: [make_job(project, 1, source(result(100.0)))], budget_s=60.0,
                 started=time.monotonic() - 100.0, lines=lines)
    assert is_run_stop(state.stopped_because) and not state.done
    assert not (project / "results.tsv").exists() or results.read_rows(project / "results.tsv") == []
    assert "0m00s of the 1m00s budget left" in "\n".join(lines)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_an_allowance_pays_for_a_starter_while_its_time_left_covers_the_longest_so_far():
    clock = Clock()
    allowance = autotune_budget.AutotuneAllowance(deadline=1000.0 + 100.0, clock=clock)
    with autotune_budget.bounded(allowance):
        tuned, timed = autotune_budget.decide("region_a")
        assert tuned, "100 s left pays for the first guess"
        with timed:
            clock.now += 45.0                  # the first autotuned starter took 45 s: 55 s left
        assert autotune_budget.decide("region_b")[0], "55 s left pays for another 45 s"
        clock.now += 20.0                      # 35 s left: not enough for 45 s
        assert not autotune_budget.decide("region_c")[0]
    assert allowance.longest_s == 45.0 and allowance.skipped == ["region_c"]
    assert autotune_budget.decide("region_d")[0], "outside a run nothing is bounded"
    assert "region_c" in autotune_budget.skipped_note(allowance, 400.0)
    assert autotune_budget.skipped_note(autotune_budget.AutotuneAllowance(deadline=0.0), 400.0) is None


def test_a_first_starter_that_cannot_be_paid_for_at_all_is_not_autotuned():
    clock = Clock()
    allowance = autotune_budget.AutotuneAllowance(deadline=clock.now + autotune_budget.FIRST_GUESS_S - 1, clock=clock)
    with autotune_budget.bounded(allowance):
        assert not autotune_budget.decide("region_a")[0]
