"""Tests for autokernel/verify/route_table.py: the decision, ours against PyTorch's at one call signature read from
repeats taken in turn (a machine busy with other work neither hides a real gain nor makes one up), and no routing by
timings that mean nothing."""

import os
import random

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.verify import latency, route_table  # noqa: E402
from tests.test_plugin import LLAMA_SHAPES, reference_sources, tiny_llama, write_optimized  # noqa: E402


def _pairs(ours_ms: list[float], theirs_ms: list[float]) -> tuple[latency.Latency, latency.Latency]:
    return latency._summary(ours_ms), latency._summary(theirs_ms)


def test_a_real_gain_is_routed_on_a_machine_whose_load_spreads_the_repeats_more_than_the_gain():
    # Another process's work slows whole pairs by up to 40% (session 27's gate: the repeats spread over 21%);
    # ours is 1.2x faster in every pair, within 1%.
    rng = random.Random(1)
    load = [1 + 0.4 * rng.random() for _ in range(16)]
    theirs = [0.8 * slow for slow in load]
    ours = [t / (1.2 * (1 + 0.01 * rng.uniform(-1, 1))) for t in theirs]
    ours_figure, theirs_figure = _pairs(ours, theirs)
    assert ours_figure.spread > 0.2 and theirs_figure.spread > 0.2          # separate repeats: noise over the gain
    routed, why = route_table.faster_by_more_than_noise(ours_figure, theirs_figure)
    assert routed and why.startswith("faster: 1.20x") and "16 pairs" in why


@pytest.mark.parametrize("seed", range(20))
def test_no_gain_is_not_routed_however_the_load_falls(seed):
    # The same kernel on both sides, each repeat slowed at random by up to 40%: never routed.
    rng = random.Random(seed)
    ours = [1 + 0.4 * rng.random() for _ in range(route_table.EAGER_PAIRS)]
    theirs = [1 + 0.4 * rng.random() for _ in range(route_table.EAGER_PAIRS)]
    routed, why = route_table.faster_by_more_than_noise(*_pairs(ours, theirs))
    assert not routed and why.startswith("not faster")


def test_a_gain_inside_the_noise_floor_is_not_routed():
    ours, theirs = _pairs([1.0] * 16, [1.02] * 16)         # 2% faster in every pair, steady: under NOISE_FLOOR
    routed, why = route_table.faster_by_more_than_noise(ours, theirs)
    assert not routed and "noise 3%" in why


def test_a_side_that_could_not_be_timed_or_timings_that_do_not_pair_are_not_routed():
    one = latency._summary([1.0] * 16)
    assert route_table.faster_by_more_than_noise(None, one) == (False, "could not be timed")
    assert route_table.faster_by_more_than_noise(one, latency._summary([2.0] * 15)) == (False, "could not be timed")


def test_the_sides_run_with_the_router_bypassed_or_not_and_the_flag_is_put_back():
    class Router:
        bypass = False
    router, seen = Router(), []
    ours = route_table._bypassing(router, False, lambda: seen.append(router.bypass))
    pytorch = route_table._bypassing(router, True, lambda: seen.append(router.bypass))
    ours(), pytorch(), ours()
    assert seen == [False, True, False] and router.bypass is False

    def broken():
        raise RuntimeError("the call failed")
    with pytest.raises(RuntimeError):
        route_table._bypassing(router, True, broken)()
    assert router.bypass is False


def test_a_site_times_ours_as_routed_against_pytorch_bypassed_in_that_order(monkeypatch):
    """_time_site hands paired() and graph_replays_paired() ours first, with the router on, and PyTorch's second,
    bypassed; were the sides swapped, every gain would read as a loss and the other way round."""
    class Router:
        bypass = False

    class Site:
        def __init__(self):
            self.ran = []
            self.run_ours = lambda: self.ran.append(("ours", router.bypass))
            self.run_pytorch = lambda: self.ran.append(("pytorch", router.bypass))
    router, site = Router(), Site()
    fast, slow = latency._summary([1.0] * 16), latency._summary([2.0] * 16)

    def paired(fn_a, fn_b, on_gpu, *, repeats):
        fn_a(), fn_b()
        return latency._summary([1.0] * repeats), latency._summary([2.0] * repeats)

    def graph_replays_paired(fn_a, fn_b):
        fn_a(), fn_b()
        return fast, slow
    monkeypatch.setattr(latency, "paired", paired)
    monkeypatch.setattr(latency, "graph_replays_paired", graph_replays_paired)
    monkeypatch.setattr(route_table, "_compiled", lambda fn: fn)
    record = route_table.RouteRecord(shape={}, dtype="float16", site="a site", calls=1)
    route_table._time_site(site, record, router)
    assert site.ran == [("ours", False), ("pytorch", True)] * 2 and router.bypass is False
    assert record.route_eager and record.route_compiled
    assert (record.ours_us, record.pytorch_us, record.ours_gpu_us, record.compiled_gpu_us) == (1e3, 2e3, 1e3, 2e3)


def test_without_a_gpu_every_site_is_recorded_and_none_routes(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES, sources=reference_sources(*LLAMA_SHAPES))
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=ALL, keep_examples=True)
        model(*inputs)
    records = route_table.measure(plugin.router_of(model), on_gpu=False)
    rows = [record for kernel_records in records.values() for record in kernel_records]
    assert sorted(records) == ["1_rmsnorm", "2_matmul", "3_flash_attention", "4_fused_mlp", "5_rotary_embedding"]
    assert {(r.site, r.calls) for r in records["2_matmul"]} == {("module layers.0.attention.q_proj (Linear)", 4),
                                                                ("module lm_head (Linear)", 1)}
    assert not any(r.route_eager or r.route_compiled for r in rows)
    assert {r.why for r in rows} == {route_table.NOT_TIMED_ON_CPU}
    assert all(r.ours_us is None for r in rows)
