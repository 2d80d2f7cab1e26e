"""Tests for autokernel/selection.py: a kernel keeps its routes only if the whole model gets faster with them."""

from autokernel import selection
from autokernel.latency import Latency
from autokernel.manifest import RouteRecord
from autokernel.variants import VariantResult


def result(variant: str, ms: float, error: float = 0.0) -> VariantResult:
    return VariantResult(variant, Latency(ms, ms * 0.995, ms * 1.005, 5), error=error)


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

    kept, trials = selection.select("eager", records, result("eager", 10.0), "ours", try_variant, lambda: None,
                                    1e-2, lambda line: None)
    # Tried in order of predicted gain: the norm saves 20 us, the rotary 4, the MLP 1.
    assert tried == [{"norm"}, {"norm", "rotary"}, {"norm", "mlp"}]
    assert [(t.kernel, t.kept) for t in trials] == [("norm", True), ("rotary", False), ("mlp", False)]
    assert kept.ms == 9.0
    assert [records[name][0].route_eager for name in ("norm", "rotary", "mlp")] == [True, False, False]
    assert "eager route dropped end to end: not faster: 0.957x" in records["rotary"][0].why


def test_a_kernel_that_breaks_the_output_is_not_kept():
    records = {"norm": [record(10, 1.0, 3.0)]}
    kept, trials = selection.select("eager", records, result("eager", 10.0), "ours",
                                    lambda variant: result(variant, 5.0, error=0.5), lambda: None, 1e-2,
                                    lambda line: None)
    assert kept is None and not records["norm"][0].route_eager
    assert trials[0].why == "output error 0.5 over 0.01"
