"""Tests for autokernel/selection.py: a kernel keeps its routes only if the whole model gets faster with them."""

from autokernel import selection
from autokernel.latency import Latency
from autokernel.manifest import RouteRecord
from autokernel.variants import VariantResult


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
