"""Tests for autokernel/policy.py: the keep rule, the noise, when a kernel is done, and how a verdict reads."""

import pytest

from autokernel import policy
from autokernel.run_state import JobProgress, RunSettings


def test_keep_rule_needs_a_pass_faster_by_more_than_the_noise():
    best = {"correctness": "PASS", "latency_us": 100.0}
    assert policy.is_improvement({"correctness": "PASS", "latency_us": 90.0}, best, noise=0.05)
    assert not policy.is_improvement({"correctness": "PASS", "latency_us": 96.0}, best, noise=0.05)
    assert not policy.is_improvement({"correctness": "FAIL", "latency_us": 10.0}, best, noise=0.05)
    assert not policy.is_improvement({"correctness": "PASS", "latency_us": None}, best, noise=0.05)


def test_noise_is_the_relative_spread_of_two_baselines_with_a_floor():
    assert policy.measured_noise({"latency_us": 100.0}, {"latency_us": 110.0}, floor=0.02) == pytest.approx(0.1)
    assert policy.measured_noise({"latency_us": 100.0}, {"latency_us": 100.5}, floor=0.02) == 0.02
    assert policy.measured_noise({"latency_us": 100.0}, {"latency_us": None}, floor=0.02) == 0.02


@pytest.mark.parametrize("change, reason", [
    ({"consecutive_reverts": 5}, "5 reverts in a row"),
    ({"elapsed_s": 7200.0}, "2h00m spent on this kernel"),
    ({"best": {"latency_us": 50.0}}, "2.00x over its baseline"),
    ({"best": {"latency_us": 90.0, "pct_peak": 95.0}}, "95% of the hardware peak"),
    ({}, None)])
def test_a_kernel_is_done_by_the_first_rule_that_fires(change, reason):
    progress = JobProgress(baseline={"latency_us": 100.0}, best={"latency_us": 90.0}, noise=0.02)
    for name, value in change.items():
        setattr(progress, name, value)
    assert policy.job_stop_reason(progress, RunSettings()) == reason


def test_a_verdict_line_says_what_happened():
    progress = JobProgress(baseline={"latency_us": 100.0}, best={"latency_us": 90.0}, noise=0.02)
    assert policy.describe_verdict(7, "keep", {"correctness": "PASS", "latency_us": 80.0}, "BLOCK 64 -> 128",
                                   progress) == "exp 7 KEEP PASS 80.0 us (1.25x baseline): BLOCK 64 -> 128"
    assert policy.describe_verdict(8, "revert", {"correctness": "FAIL", "message": "wrong\nvalues"}, "x",
                                   progress) == "exp 8 REVERT FAIL -: x [wrong values]"
