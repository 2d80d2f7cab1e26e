"""Tests for autokernel/search/policy.py: the keep rule, the noise, when a kernel is done, and how a verdict reads."""

import pytest

from autokernel.core.contracts import NO_GAIN, SPEED_UNKNOWN, WINNER, BenchResult, JudgedResult, RunSettings
from autokernel.core.run_records import JobProgress
from autokernel.search import policy


def bench(correctness: str = "PASS", **fields) -> BenchResult:
    return BenchResult(correctness=correctness, **fields)


def judged(correctness: str = "PASS", **fields) -> JudgedResult:
    """A judged result as state.json holds it: the bench's fields and the policy's figures side by side."""
    return JudgedResult.from_json({"correctness": correctness, **fields})


def test_keep_rule_needs_a_pass_faster_by_more_than_the_noise():
    best = judged(latency_us=100.0)
    assert policy.is_improvement(bench(latency_us=90.0), best, noise=0.05)
    assert policy.is_improvement(judged(latency_us=90.0), best, noise=0.05)
    assert not policy.is_improvement(bench(latency_us=96.0), best, noise=0.05)
    assert not policy.is_improvement(bench("FAIL", latency_us=10.0), best, noise=0.05)
    assert not policy.is_improvement(bench(latency_us=None), best, noise=0.05)


def test_noise_is_the_relative_spread_of_two_baselines_with_a_floor():
    assert policy.measured_noise(bench(latency_us=100.0), bench(latency_us=110.0), floor=0.02) == pytest.approx(0.1)
    assert policy.measured_noise(bench(latency_us=100.0), bench(latency_us=100.5), floor=0.02) == 0.02
    assert policy.measured_noise(bench(latency_us=100.0), bench(latency_us=None), floor=0.02) == 0.02


@pytest.mark.parametrize("change, reason", [
    ({"consecutive_reverts": 5}, "5 reverts in a row"),
    ({"elapsed_s": 7200.0}, "2h00m spent on this kernel"),
    ({"best": judged(latency_us=50.0)}, "2.00x over its baseline"),
    ({"best": judged(latency_us=90.0, pct_peak=95.0)}, "95% of the hardware peak"),
    ({}, None)])
def test_a_kernel_is_done_by_the_first_rule_that_fires(change, reason):
    progress = JobProgress(baseline=judged(latency_us=100.0), best=judged(latency_us=90.0), noise=0.02)
    for name, value in change.items():
        setattr(progress, name, value)
    assert policy.job_stop_reason(progress, RunSettings()) == reason


def test_a_verdict_line_says_what_happened():
    progress = JobProgress(baseline=judged(latency_us=100.0), best=judged(latency_us=90.0), noise=0.02)
    assert policy.describe_verdict(7, "keep", judged(latency_us=80.0), "BLOCK 64 -> 128",
                                   progress) == "exp 7 KEEP PASS 80.0 us (1.25x baseline): BLOCK 64 -> 128"
    assert policy.describe_verdict(8, "revert", judged("FAIL", message="wrong\nvalues"), "x",
                                   progress) == "exp 8 REVERT FAIL -: x [wrong values]"


def _timed(ours, eager, compiled=None, shape="M=4096,N=4096"):
    return {"shape": shape, "latency_us": ours, "pytorch_latency_us": eager, "compile_latency_us": compiled}


def test_pytorch_best_is_the_faster_of_eager_and_the_baselines_torch_compile_shape_by_shape():
    compile_us = {"M=1,N=8": 9.0, "M=4096,N=4096": 40.0}      # timed once, with the baseline
    result = bench(timings_meaningful=True, speedup_vs_pytorch=1.5,
                   timings=[_timed(6.0, 12.0, shape="M=1,N=8"), _timed(50.0, 60.0, shape="M=4096,N=4096")])
    seen = policy.against_pytorch_best(result, compile_us, noise=0.02)

    assert [row["pytorch_best_us"] for row in seen.bench.timings] == [9.0, 40.0]
    assert seen.bench.speedup_vs_compile == pytest.approx(49.0 / 56.0)
    assert seen.speedup_vs_best == pytest.approx(49.0 / 56.0)
    # A winner only where it beats PyTorch's best: the small shape, not the big one torch.compile wins.
    assert seen.wins_at == ["M=1,N=8"] and policy.verdict(seen) == WINNER and policy.is_saved(seen)
    assert result.speedup_vs_compile is None and "pytorch_best_us" not in result.timings[0], \
        "the judge's own result is not changed"
    # In state.json the figures sit beside the bench's fields, as they always have.
    written = seen.to_json()
    assert written["wins_at"] == ["M=1,N=8"] and written["latency_us"] is None and "bench" not in written
    assert JudgedResult.from_json(written) == seen


def test_a_win_inside_the_noise_is_no_win_and_a_failure_gets_no_figures():
    close = bench(timings_meaningful=True, timings=[_timed(98.0, 100.0)])
    seen = policy.against_pytorch_best(close, {}, noise=0.05)
    assert seen.wins_at == [] and policy.verdict(seen) == NO_GAIN and policy.is_saved(seen)      # verify tries it
    assert seen.speedup_vs_best == pytest.approx(100.0 / 98.0) and seen.bench.speedup_vs_compile is None
    failed = bench("FAIL")
    assert not policy.is_saved(JudgedResult(failed))
    assert policy.against_pytorch_best(failed, {"M=4096,N=4096": 1.0}, 0.02) == JudgedResult(failed)
    assert "wins_at" not in JudgedResult(failed).to_json(), "no figure is written that was not computed"


def test_without_meaningful_timings_a_kernel_is_never_a_winner_but_is_saved_for_verify():
    # The CPU interpreter: nothing to compare, so never a winner, even where its times "beat" PyTorch's;
    # the kernel is correct, and saved so verify can be tried without a GPU.
    for wins_at in ([], ["M=1,N=8"]):
        cpu = judged(timings_meaningful=False, wins_at=wins_at)
        assert policy.verdict(cpu) == SPEED_UNKNOWN == "correct; speed unknown on CPU" and policy.is_saved(cpu)
    progress = JobProgress(baseline=judged(latency_us=2e6), best=judged(latency_us=1e6, timings_meaningful=False),
                           noise=0.02, experiments=3)
    line = policy.describe_ending("1_rmsnorm", progress, "5 reverts in a row", final=True)
    assert "correct; speed unknown on CPU" in line and "x over" not in line and "winner" not in line


def test_compile_times_come_from_the_compare_compile_run():
    run = bench(timings=[_timed(5.0, 6.0, 4.0, "M=1,N=8"), _timed(5.0, 6.0, None, "M=2,N=8")])
    assert policy.compile_times(run) == {"M=1,N=8": 4.0}


def test_a_job_that_ends_without_a_win_says_no_gain_and_by_how_much():
    progress = JobProgress(baseline=judged(latency_us=100.0), noise=0.02, experiments=7,
                           best=judged(latency_us=80.0, timings=[{"pytorch_best_us": 60.0}], timings_meaningful=True,
                                       wins_at=[]))
    line = policy.describe_ending("1_softmax", progress, "5 reverts in a row", final=True)
    assert line == ("1_softmax done (5 reverts in a row): no gain alone: its best, 80.0 us, beats "
                    "PyTorch's best (60.0 us) at none of the job's shapes (1.25x over its baseline, 7 experiments); "
                    "in optimized_kernels/1_softmax.py for verify to try in the model")
    progress.best.wins_at = ["M=1,N=8"]
    saved = policy.describe_ending("1_softmax", progress, "the run's time budget is spent", final=False)
    assert saved.startswith("1_softmax saved so far") and "optimized_kernels/1_softmax.py" in saved


def test_a_keep_whose_speedup_vs_pytorch_fell_says_why():
    best = judged(latency_us=100.0, speedup_vs_pytorch=1.5, pytorch_latency_us=150.0)
    faster = dict(latency_us=80.0, speedup_vs_pytorch=1.25, pytorch_latency_us=100.0)
    assert policy.keep_note(judged(**faster), best) == (
        " [kept for its latency, 80.0 us against the best's 100.0 us; its speedup vs PyTorch is lower because PyTorch "
        "eager timed 100.0 us in this bench, 150.0 us in the best's]")
    assert policy.keep_note(judged(**{**faster, "speedup_vs_pytorch": 1.9}), best) == "", "nothing to explain"
    assert policy.keep_note(judged(**{**faster, "speedup_vs_pytorch": None}), best) == ""
