"""Tests for autokernel/budget.py: the run's clock across resumes, and bench limits from measured durations."""

import pytest

from autokernel.budget import BENCH_LIMIT_SLACK_S, Budget, bench_limit


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
