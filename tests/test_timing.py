"""Timing: the timed call, the judge's checks on a worker's timings, roofline and speed of light."""

import pytest
import torch

from autokernel.core.hardware import CPU_INTERPRETER, GPUSpec
from autokernel.judge import timing
from autokernel.judge.timing import TimedCall, speed_of_light_ms, speed_of_light_problem, timing_problem
from autokernel.kernel_types import registry

H100 = GPUSpec("NVIDIA H100 SXM", 989.4, 989.4, 66.9, 3350.0)


def test_timed_call_on_cpu_returns_the_output_and_wall_clock_times():
    clock = timing.Clock(torch.device("cpu"))
    output, record = timing.timed_call(clock, lambda x: x * 2, {"x": torch.ones(3)})
    assert torch.equal(output, torch.full((3,), 2.0))
    assert set(record) == {"host_ms", "launch_ms", "wall_ms", "kernel_ms"}
    assert 0 <= record["launch_ms"] <= record["host_ms"] <= record["wall_ms"] and record["kernel_ms"] == record["host_ms"]


def test_a_call_costs_its_gpu_time_or_its_launch_time_whichever_is_longer():
    # A big kernel: the GPU's time; a tiny one whose Python wrapper takes longer: the host's.
    assert timing.call_ms({"kernel_ms": 0.500, "launch_ms": 0.020}) == 0.500
    assert timing.call_ms({"kernel_ms": 0.004, "launch_ms": 0.030}) == 0.030
    slow_wrapper = timing.Clock(torch.device("cpu"))
    _, record = timing.timed_call(slow_wrapper, lambda: __import__("time").sleep(0.01), {})
    assert record["launch_ms"] >= 10.0


def test_the_clock_is_bound_when_made():
    import time
    clock = timing.Clock(torch.device("cpu"))
    real = time.perf_counter
    time.perf_counter = lambda: 0.0
    try:
        assert clock.perf is real
    finally:
        time.perf_counter = real


def test_speed_of_light_fails_a_time_faster_than_the_bandwidth_allows():
    kt = registry.get("softmax")
    shape = {"M": 8192, "N": 8192}                      # 268 MB in float16: 80 us at 3.35 TB/s
    floor = speed_of_light_ms(kt, shape, torch.float16, H100)
    assert floor == pytest.approx(2 * 8192 * 8192 * 2 / 3350e9 / timing.BANDWIDTH_MARGIN * 1e3)
    assert speed_of_light_problem(kt, shape, torch.float16, 0.095, H100) is None      # the honest 95 us
    message = speed_of_light_problem(kt, shape, torch.float16, 0.0013, H100)          # the measured 1.3 us
    assert "faster than the hardware allows" in message and "NVIDIA H100 SXM" in message


def test_speed_of_light_fails_a_time_faster_than_the_compute_peak_allows():
    kt = registry.get("matmul")
    shape = {"M": 4096, "N": 4096, "K": 4096}           # 137 GFLOP: 139 us at 989 TFLOP/s
    assert speed_of_light_problem(kt, shape, torch.float16, 0.2, H100) is None
    assert "faster than the hardware allows" in speed_of_light_problem(kt, shape, torch.float16, 0.05, H100)
    # float32 is held to the fastest rate (tensor cores), not the plain float32 one
    assert speed_of_light_problem(kt, shape, torch.float32, 0.2, H100) is None


def test_speed_of_light_is_skipped_without_datasheet_peaks():
    kt = registry.get("softmax")
    assert "no GPU" in timing.speed_of_light_skipped(CPU_INTERPRETER)
    assert speed_of_light_problem(kt, {"M": 8192, "N": 8192}, torch.float16, 1e-9, CPU_INTERPRETER) is None
    guessed = GPUSpec("Some GPU", 100.0, 100.0, 10.0, 1000.0, estimated=True)
    assert "estimates" in timing.speed_of_light_skipped(guessed)
    assert timing.speed_of_light_skipped(H100) is None


def _call(kernel, flush=0.08, host=0.03, bracket=None):
    record = {"kernel_ms": kernel, "flush_ms": flush, "host_ms": host, "wall_ms": flush + kernel}
    return TimedCall(record, bracket if bracket is not None else max(flush + kernel, host) + 0.02)


EMPTY = [_call(0.002) for _ in range(10)]


def test_honest_timings_pass():
    assert timing_problem([_call(0.095) for _ in range(50)], EMPTY, flush_ms=0.08) is None
    # a kernel whose host overhead exceeds its GPU time is honest too
    assert timing_problem([_call(0.005, host=0.2) for _ in range(50)], EMPTY, flush_ms=0.08) is None


def test_work_that_overlaps_the_flush_fails():
    calls = [_call(0.002, flush=0.08 + 0.095) for _ in range(50)]      # the kernel ran beside the flush
    assert "cache flush" in timing_problem(calls, EMPTY, flush_ms=0.08)


def test_work_the_events_did_not_see_fails():
    calls = [_call(0.0013, bracket=0.08 + 0.095 + 0.02) for _ in range(50)]    # busy 95 us after "1.3 us"
    assert "left work running" in timing_problem(calls, EMPTY, flush_ms=0.08)


def test_timing_checks_do_not_apply_on_cpu():
    assert timing_problem([TimedCall({"kernel_ms": 5.0, "host_ms": 5.0, "wall_ms": 5.0}, 50.0)], [], None) is None


def _gpu_clock_stand_in(cycles_per_ms: float) -> timing.Clock:
    """A Clock that sizes pads as a GPU's would (no GPU needed: pad_cycles only does arithmetic)."""
    clock = timing.Clock(torch.device("cpu"))
    clock.on_gpu, clock._cycles_per_ms = True, cycles_per_ms
    return clock


def test_the_pad_covers_a_host_time_longer_than_the_flush_and_nothing_else():
    clock = _gpu_clock_stand_in(cycles_per_ms=1.98e6)            # a 1.98 GHz clock
    # the H100 case: 250 us of host time per call after a 160 us flush -> pad to 1.5 x 250 us + 20 us
    pad = clock.pad_cycles(host_ms=0.250, flush_ms=0.160)
    assert pad == int((1.5 * 0.250 + 0.02 - 0.160) * 1.98e6)
    assert clock.pad_cycles(host_ms=0.030, flush_ms=0.160) == 0     # the flush already covers the host
    assert clock.pad_cycles(host_ms=1e3, flush_ms=0.160) == int(timing.MAX_PAD_MS * 1.98e6)   # capped
    assert timing.Clock(torch.device("cpu")).pad_cycles(host_ms=5.0, flush_ms=0.0) == 0     # never on CPU


def test_a_padded_flush_of_the_expected_length_passes_and_a_longer_one_fails():
    # The judge measured a 0.08 ms flush and gave a 0.2 ms pad: calls that saw 0.28 ms are honest.
    padded = [_call(0.010, flush=0.28, host=0.25) for _ in range(50)]
    assert timing_problem(padded, EMPTY, flush_ms=0.08, pad_ms=0.2) is None
    # Work hidden beside the pad (a side stream) makes the flush-and-pad take longer than both allow.
    overlapped = [_call(0.010, flush=0.40, host=0.25) for _ in range(50)]
    assert "cache flush" in timing_problem(overlapped, EMPTY, flush_ms=0.08, pad_ms=0.2)
    # The same reading without a pad given is caught too: a worker cannot claim a pad it was not given.
    assert "cache flush" in timing_problem(padded, EMPTY, flush_ms=0.08)


def _proved(kernel_ms: float, proof_ms: float, cpu_ms: float | None = None) -> TimedCall:
    return TimedCall({"kernel_ms": kernel_ms, "host_ms": kernel_ms, "wall_ms": kernel_ms}, kernel_ms, proof_ms,
                     cpu_ms=cpu_ms)


def test_on_a_gpu_the_proof_clock_judges_nothing_until_it_is_calibrated_there():
    # H200: an honest softmax at 8192 x 8192 (68 us) showed 0.34-0.54 ms beyond the empty calls and failed 3 of 5.
    empty = [_proved(0.0, 0.6)]
    honest_there = [_proved(0.068, 0.6 + 0.45)]
    assert not timing.PROOF_ON_GPU
    assert timing.proof_problem(honest_there, empty, own_ms=0.3, on_gpu=True) is None
    forged = [_proved(0.35, 4.3)]            # what the CPU's rule refuses, the GPU's older checks must see there
    assert timing.proof_problem(forged, empty, own_ms=0.3, on_gpu=False) is not None
    assert timing.proof_problem(forged, empty, own_ms=0.3, on_gpu=True) is None


def test_the_judges_own_clock_bounds_the_workers_times_from_below_on_every_device():
    empty = [_proved(0.0, 0.6), _proved(0.0, 0.9)]          # the bracket's own cost: the fastest, 0.6 ms
    honest = [_proved(3.5, 4.3), _proved(3.6, 9.0), _proved(3.4, 4.2)]    # one call delayed by a busy machine
    assert timing.proof_problem(honest, empty, own_ms=0.05, on_gpu=False) is None
    # The silenced tamper check's tenth, or work done before "started": the judge's clock saw 3.6 ms each.
    forged = [_proved(0.35, 4.3), _proved(0.36, 4.2), _proved(0.34, 4.4)]
    assert "did not time the work it did" in timing.proof_problem(forged, empty, own_ms=0.05, on_gpu=False)
    # Half the judge's bound, less the slack, is the least a worker may report.
    bound = 4.2 - 0.6
    assert timing.proof_problem([_proved(bound / timing.PROOF_RATIO - timing.PROOF_SLACK_MS[False], 4.2)], empty,
                                own_ms=0.05, on_gpu=False) is None
    assert timing.proof_problem([_proved(bound / timing.PROOF_RATIO - timing.PROOF_SLACK_MS[False] - 0.01, 4.2)],
                                empty, own_ms=0.05, on_gpu=False) is not None
    assert timing.proof_problem([], empty, own_ms=0.05, on_gpu=False) is None


def test_empty_calls_slowed_by_the_candidate_cannot_hide_its_work():
    # The empty calls run in the candidate's process: made slow, they would pass off its work as the bracket's.
    slowed = [_proved(0.0, 4.0) for _ in range(3)]
    cap = timing.OVERHEAD_COVER * 0.05 + timing.OVERHEAD_SLACK_MS[False]
    assert timing.bracket_overhead_ms(slowed, own_ms=0.05, on_gpu=False) == pytest.approx(cap)
    forged = [_proved(0.35, 4.3) for _ in range(3)]
    assert "did not time the work it did" in timing.proof_problem(forged, slowed, own_ms=0.05, on_gpu=False)
    assert timing.bracket_overhead_ms([], own_ms=0.05, on_gpu=False) == pytest.approx(cap)


def test_waits_for_a_core_on_a_shared_machine_are_not_taken_for_hidden_work():
    # CI, two loaded cores: an honest 3.6 ms call whose processes waited for a core as they woke, 10 ms more each on
    # the wall clock (a FAIL there); their CPU time over the same span shows the work and its bracket alone.
    empty = [_proved(0.0, 0.9, cpu_ms=0.5), _proved(0.0, 5.2, cpu_ms=0.4)]
    honest = [_proved(3.6, 14.0, cpu_ms=4.2), _proved(3.5, 13.8, cpu_ms=4.1), _proved(3.7, 15.1, cpu_ms=4.3)]
    assert timing.busy_ms(honest[0]) == 4.2 and timing.busy_ms(_proved(3.6, 3.9, cpu_ms=4.2)) == 3.9
    assert "did not time the work it did" in timing.proof_problem(
        [_proved(c.record["kernel_ms"], c.proof_ms) for c in honest], empty, own_ms=0.05, on_gpu=False)
    assert timing.proof_problem(honest, empty, own_ms=0.05, on_gpu=False) is None
    # A forger's tenth stays a FAIL on the CPU clock, which counts the work wherever the worker's threads did it.
    forged = [_proved(0.36, 14.0, cpu_ms=4.2), _proved(0.35, 13.8, cpu_ms=4.1), _proved(0.37, 15.1, cpu_ms=4.3)]
    assert "did not time the work it did" in timing.proof_problem(forged, empty, own_ms=0.05, on_gpu=False)
    # Where the CPU clock could not count all of it (a process born in the span: judge_link), the wall clock judges.
    unread = [_proved(0.36, 4.3), _proved(0.35, 4.2)]
    assert "did not time the work it did" in timing.proof_problem(unread, empty, own_ms=0.05, on_gpu=False)


def test_a_call_on_the_wall_clock_is_never_judged_against_an_empty_calls_cpu_time():
    # Every checked call's CPU time withheld (another job's task ended during each), one empty call's read: the wall
    # clock's own bound (3.6 ms less its 2.0 ms overhead) judges, not 3.6 ms less the empty call's 0.3 ms of CPU.
    empty = [_proved(0.0, 2.0, cpu_ms=0.3), _proved(0.0, 2.2)]
    checked = [_proved(1.0, 3.6), _proved(1.0, 3.7)]
    assert timing.proof_problem(checked, empty, own_ms=1.0, on_gpu=False) is None
    assert timing.bracket_overhead_ms(empty, own_ms=1.0, on_gpu=False) == 0.3
    assert timing.bracket_overhead_ms(empty, own_ms=1.0, on_gpu=False, clock=timing.wall_ms) == 2.0


def _timing_stage_with(monkeypatch, timings):
    """timing_stage.trusted_timing over a scripted series of timings (each a list of timed calls)."""
    import types

    from autokernel.judge import timing_stage

    series = iter(timings)

    def time_candidate(*args):
        calls = next(series)
        if isinstance(calls, Exception):
            raise calls
        return timing_stage.CandidateTiming(calls, [], EMPTY, 0, 0.0)
    monkeypatch.setattr(timing_stage, "time_candidate", time_candidate)
    monkeypatch.setattr(timing_stage, "RETRY_PAUSE_S", 0.0)
    judge = types.SimpleNamespace(where=lambda shape: "M=4,N=8 float16")
    return lambda: timing_stage.trusted_timing(judge, {"M": 4, "N": 8}, None, 0.08)


def test_a_timing_a_busy_machine_spoiled_is_timed_again(monkeypatch, capsys):
    from autokernel.judge import timing_stage

    honest, spoiled = [_call(0.095) for _ in range(50)], [_call(0.095, bracket=0.8) for _ in range(50)]
    assert _timing_stage_with(monkeypatch, [spoiled, honest])().timed is honest
    assert f"timing 1 of {timing_stage.TIMING_ATTEMPTS} at M=4,N=8 float16 not trusted" in capsys.readouterr().err


def test_work_hidden_from_the_timer_in_every_timing_fails(monkeypatch):
    from autokernel.judge import timing_stage
    from autokernel.judge.correctness import CheckFailure

    hiding = [_call(0.0013, bracket=0.08 + 0.095 + 0.02) for _ in range(50)]
    trusted = _timing_stage_with(monkeypatch, [hiding] * timing_stage.TIMING_ATTEMPTS + [[_call(0.095)] * 50])
    attempts = timing_stage.TIMING_ATTEMPTS
    with pytest.raises(CheckFailure, match=rf"left work running.*in each of {attempts} timing\(s\)"):
        trusted()


def test_a_wrong_result_in_a_timing_is_never_timed_again(monkeypatch):
    from autokernel.judge.correctness import CheckFailure

    honest = [_call(0.095) for _ in range(50)]
    trusted = _timing_stage_with(monkeypatch, [CheckFailure("timed call 3 of 50 returned a wrong result"), honest])
    with pytest.raises(CheckFailure, match="wrong result"):
        trusted()


def test_no_timing_starts_once_the_attempts_took_their_time(monkeypatch):
    from autokernel.judge import timing_stage
    from autokernel.judge.correctness import CheckFailure

    hiding = [_call(0.0013, bracket=0.08 + 0.095 + 0.02) for _ in range(50)]
    trusted = _timing_stage_with(monkeypatch, [hiding, [_call(0.095)] * 50])
    monkeypatch.setattr(timing_stage, "RETRY_WITHIN_S", 0.0)
    with pytest.raises(CheckFailure, match=r"in each of 1 timing\(s\)"):
        trusted()


def test_the_timing_kept_says_how_many_were_not_trusted_before_it(monkeypatch):
    from autokernel.profile.regions import pick

    honest, spoiled = [_call(0.095) for _ in range(50)], [_call(0.095, bracket=0.8) for _ in range(50)]
    kept = _timing_stage_with(monkeypatch, [spoiled, spoiled, honest])()
    assert len(kept.untrusted_before) == 2 and "left work running" in kept.untrusted_before[0]
    # The region pick's line in verify's output shows it, so a gate's log says where a busy machine cost a timing.
    verdict = pick.Verdict("engine", "PASS", 394.8, retimed=pick._retimed([{"untrusted_timings": 2}]))
    assert verdict.show() == "engine PASS 394.8 us (timed again 2x: a busy machine)"
    assert pick.Verdict("engine", "PASS", 394.8, retimed=pick._retimed([{"timed_calls": 20}])).show() == \
        "engine PASS 394.8 us"
