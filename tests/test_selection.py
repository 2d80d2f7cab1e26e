"""Tests for autokernel/verify/selection.py: a kernel keeps its routes only if the whole model gets faster with them."""

import pytest

from autokernel.routing.manifest import RouteRecord
from autokernel.verify import selection
from autokernel.verify.latency import Latency, _summary
from autokernel.verify.variants import VariantResult


def latency(ms: float) -> Latency:
    return Latency(ms, ms * 0.995, ms * 1.005, 5)


def result(variant: str, ms: float, error: float = 0.0, pytorch_ms: float = 10.0) -> VariantResult:
    return VariantResult(variant, latency(ms), error=error, baseline=latency(pytorch_ms))


def record(calls: int, ours: float, theirs: float) -> RouteRecord:
    return RouteRecord(shape={"M": calls}, dtype="float16", site="s", calls=calls, ours_us=ours, pytorch_us=theirs,
                       route_eager=True, why="eager: faster")


def test_winners_in_the_model_are_kept_and_losers_dropped_with_the_reason():
    records = {"norm": [record(10, 1.0, 3.0)], "rotary": [record(4, 1.0, 2.0)], "mlp": [record(2, 5.0, 5.5)]}
    # The model with the norm's routes is faster; adding the rotary makes it slower; the MLP's gain is noise.
    timings = {frozenset(): 10.0, frozenset({"norm"}): 9.0, frozenset({"norm", "rotary"}): 9.4,
               frozenset({"norm", "mlp"}): 8.99}
    tried = []

    def try_variant(variant):
        routed = frozenset(name for name, rs in records.items() if rs[0].route_eager)
        tried.append(set(routed))
        return result(variant, timings[routed])

    kept, trials = selection.select("eager", records, "ours", try_variant, lambda: None, 1e-2, lambda line: None)
    # Tried in order of predicted gain: the norm saves 20 us, the rotary 4, the MLP 1.
    assert tried == [{"norm"}, {"norm", "rotary"}, {"norm", "mlp"}]
    assert [(t.kernel, t.kept) for t in trials] == [("norm", True), ("rotary", False), ("mlp", False)]
    assert kept.ms == 9.0
    assert [records[name][0].route_eager for name in ("norm", "rotary", "mlp")] == [True, False, False]
    assert "eager route dropped end to end: not faster: 1.064x PyTorch's own path" in records["rotary"][0].why
    assert trials[0].speedup == 10.0 / 9.0 and trials[1].best_before == trials[0].speedup


def test_the_speedup_is_taken_against_pytorch_timed_in_turn_on_a_drifting_machine():
    # The machine is 30% slower during the trial than when PyTorch was first timed alone: a paired
    # baseline sees the same slowdown, so the kernel's real 10% gain still shows.
    records = {"norm": [record(10, 1.0, 3.0)]}
    kept, trials = selection.select("eager", records, "ours", lambda v: result(v, 11.7, pytorch_ms=13.0),
                                    lambda: None, 1e-2, lambda line: None)
    assert trials[0].kept and kept.ms == 11.7


def test_a_kernel_that_breaks_the_output_is_not_kept():
    records = {"norm": [record(10, 1.0, 3.0)]}
    kept, trials = selection.select("eager", records, "ours", lambda variant: result(variant, 5.0, error=0.5),
                                    lambda: None, 1e-2, lambda line: None)
    assert kept is None and not records["norm"][0].route_eager
    assert trials[0].why == "output error 0.5 over 0.01"


def paired_result(ours_ms: list[float], pytorch_ms: list[float]) -> VariantResult:
    return VariantResult("ours", _summary(ours_ms), error=0.0, baseline=_summary(pytorch_ms))


def test_a_real_gain_survives_a_machine_that_drifts_during_the_trial():
    # Ours is 1.2x in every pair, while the machine slows 60% over the repeats: each series alone spreads
    # wider than the gain (23%), which the medians-and-spreads rule would have called noise.
    drift = [1.0, 1.15, 1.3, 1.45, 1.6]
    records = {"matmul": [record(10, 1.0, 3.0)]}
    kept, trials = selection.select("eager", records, "ours",
                                    lambda v: paired_result([10 * d / 1.2 for d in drift], [10 * d for d in drift]),
                                    lambda: None, 1e-2, lambda line: None)
    assert trials[0].kept and trials[0].speedup == pytest.approx(1.2)
    assert "of the paired repeats" in trials[0].why


def test_a_gain_inside_the_pairs_own_noise_is_not_kept():
    # Pair by pair ours is sometimes faster, sometimes slower: the median ratio 1.05 is inside the noise.
    records = {"matmul": [record(10, 1.0, 3.0)]}
    kept, trials = selection.select("eager", records, "ours",
                                    lambda v: paired_result([10, 10, 10, 10, 10], [12, 9.0, 10.5, 9.5, 11.5]),
                                    lambda: None, 1e-2, lambda line: None)
    assert kept is None and not trials[0].kept and not records["matmul"][0].route_eager
    assert "not faster: 1.050x" in trials[0].why
