"""Tests for autokernel/search/budget.py: the run's clock across resumes, and bench limits from measured durations."""

import pytest

from autokernel.core.contracts import JudgedResult
from autokernel.search.budget import (BENCH_LIMIT_SLACK_S, ONE_RUN_BASELINE, BenchTimes, Budget, bench_limit,
                                     checked_dtypes)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_time_used_carries_over_and_counts_from_the_start():
    clock = Clock()
    budget = Budget(60.0, used_before_s=20.0, started=95.0, clock=clock)   # the command started 5 s ago
    assert budget.used() == 25.0 and budget.left() == 35.0 and budget.deadline() == 135.0
    clock.now += 40
    assert budget.left() == -5.0


def test_a_bench_limit_comes_from_the_measured_duration_within_the_ceiling():
    assert bench_limit(None, 900.0) == 900.0
    assert bench_limit(5.0, 900.0) == 5.0 + BENCH_LIMIT_SLACK_S
    assert bench_limit(100.0, 900.0) == pytest.approx(300.0)
    assert bench_limit(400.0, 900.0) == 900.0


def _baseline_row(kernel_type: str, seconds: float, *, meaningful: bool = False, description: str = "baseline",
                  correctness: str = "PASS") -> dict:
    return {"kernel_type": kernel_type, "status": "baseline", "correctness": correctness,
            "timings_meaningful": meaningful if correctness == "PASS" else None, "wall_seconds": seconds,
            "description": description}


def test_a_baselines_cost_is_its_types_last_baseline_on_this_kind_of_device():
    times = BenchTimes()
    assert times.baseline_run_s("rmsnorm_linear", [], meaningful=False) is None, "nothing measured: no guess"
    times.record(None, 12.0, quick=True, compare_compile=False)
    assert times.baseline_run_s("rmsnorm_linear", [], meaningful=False) == 12.0, "else this run's longest bench"
    rows = [_baseline_row("rmsnorm_linear", 180.0),                          # an older CPU baseline: two runs
            _baseline_row("softmax", 8.0),
            _baseline_row("rmsnorm_linear", 9.0, meaningful=True),            # a GPU's: not this kind of device
            _baseline_row("rmsnorm_linear", 1.0, correctness="FAIL")]         # failed: says nothing of the cost
    assert times.baseline_run_s("rmsnorm_linear", rows, meaningful=False) == 90.0
    assert times.baseline_run_s("rmsnorm_linear", rows, meaningful=True) == 4.5
    rows.append(_baseline_row("rmsnorm_linear", 70.0, description=f"baseline ({ONE_RUN_BASELINE}: no time for a "
                                                                  f"second; noise floor 2.0%)"))
    assert times.baseline_run_s("rmsnorm_linear", rows, meaningful=False) == 70.0


def test_the_budget_left_cuts_every_bench_limit_measured_or_not():
    times = BenchTimes()
    assert times.limit(None, True, 900.0, left_s=50.0) == (50.0, True)
    times.record(None, 20.0, quick=True, compare_compile=False)
    assert times.limit(None, True, 900.0, left_s=500.0) == (60.0, False)
    assert times.limit(None, True, 900.0, left_s=25.0) == (25.0, True), "measured, and still cut at the budget"


def test_a_jobs_first_baseline_run_gets_the_ceiling_however_quick_the_other_jobs_were():
    times = BenchTimes()
    times.record(None, 20.0, quick=False, compare_compile=False)           # another job's bench: 20 s
    assert times.limit(None, False, 900.0, left_s=500.0) == (60.0, False), "a second run is held to 3x the typical"
    assert times.limit(None, False, 900.0, left_s=5000.0, first_baseline=True) == (900.0, False), \
        "a first run compiles every shape: the others' times say nothing of it"
    assert times.limit(None, False, 900.0, left_s=120.0, first_baseline=True) == (120.0, True), "the budget still cuts it"


def test_a_lanes_first_baseline_run_is_limited_by_the_ceiling_and_its_second_by_the_benches_so_far(tmp_path):
    from types import SimpleNamespace

    from autokernel.search.lanes import Lane
    from autokernel.search.parallel_loop import ParallelRun
    from tests.loop_helpers import make_job, result, source

    run = ParallelRun.__new__(ParallelRun)       # only what a task's limits read
    run.settings, run.quick_bench = SimpleNamespace(experiment_timeout_s=900.0), False
    run.bench_times, run.budget, run._seed = BenchTimes(), Budget(5000.0), 1
    run.bench_times.record(None, 20.0, quick=False, compare_compile=False)      # the other jobs' benches: 20 s
    job = make_job(tmp_path, 1, source(result(100.0)))
    lane = Lane(0, job)
    first, clipped = run._task(job, None, lane.source, quick=False, compare_compile=True, timing=lane)
    assert (first.timeout_s, clipped) == (900.0, False), "a starter's first run compiles every shape: the ceiling"
    lane.runs.append(result(100.0))
    lane.bench_seconds["cold"] = 25.0                                           # what the first run recorded
    second, _ = run._task(job, None, lane.source, quick=False, timing=lane)
    assert second.timeout_s == 75.0, "the second run is held to its first's measured time"


def test_a_baseline_in_one_dtype_sets_a_full_judges_estimate_and_floor_per_dtype():
    # A job's baseline checks its dtype alone; a full judge compiles the candidate in each of the type's dtypes.
    from types import SimpleNamespace

    times, job = BenchTimes(), SimpleNamespace(bench_seconds={})
    times.record(job, 80.0, quick=False, compare_compile=True)                  # the first run: cold, one dtype
    times.record(job, 20.0, quick=False, compare_compile=False, baseline=True)   # the second
    assert checked_dtypes("softmax", one_dtype=False) == 3 and checked_dtypes("softmax", one_dtype=True) == 1
    assert times.expected(job, quick=True) == 20.0, "a screen checks one dtype, as the baseline did"
    assert times.expected(job, quick=False, dtypes=3) == 60.0
    assert times.limit(job, True, 900.0, 5000.0) == (80.0, False), "the screen: at least the cold run's time"
    assert times.limit(job, False, 900.0, 5000.0, dtypes=3) == (240.0, False), "the full judge: cold in each dtype"
    times.record(job, 45.0, quick=False, compare_compile=False)                  # a full judge measured
    assert times.expected(job, quick=False, dtypes=3) == 45.0
    # A baseline that stood on its first run alone: that run (it timed torch.compile too) is the estimate, not 0.
    assert BenchTimes().expected(SimpleNamespace(bench_seconds={"cold": 80.0}), quick=False, dtypes=3) == 240.0


def test_a_lanes_baseline_checks_its_dtype_alone_and_a_candidates_full_judge_gets_the_cold_floor_per_dtype(tmp_path):
    from types import SimpleNamespace

    from autokernel.core.run_records import JobProgress
    from autokernel.search.lanes import Lane
    from autokernel.search.parallel_loop import ParallelRun
    from tests.loop_helpers import bench_result, make_job, result, source

    run = ParallelRun.__new__(ParallelRun)
    run.settings, run.quick_bench = SimpleNamespace(experiment_timeout_s=900.0), False
    run.bench_times, run.budget, run._seed = BenchTimes(), Budget(5000.0), 1
    job = make_job(tmp_path, 1, source(result(100.0)))
    lane = Lane(0, job)
    first, _ = run._task(job, None, lane.source, quick=False, compare_compile=True, timing=lane)
    assert first.extra_args == ["--one-dtype", "--compare-compile"] and first.full_timeout_s is None
    baseline = JudgedResult(bench_result(100.0))
    progress = JobProgress(baseline=baseline, best=baseline, noise=0.02, bench_seconds={"cold": 80.0, "baseline": 20.0})
    candidate, _ = run._task(job, progress, "candidate", quick=True)
    assert candidate.extra_args == ["--screen"]
    assert (candidate.timeout_s, candidate.full_timeout_s) == (80.0, 240.0)
