"""Rewrites as routes of verify's selection (autokernel/verify/rewrites.py): batch norm folding and linears
concatenated, each tried end to end after the kernels, kept only where the model gets faster with it, and named in the code the
verdict hands over.

Speed is never measured here: the timer reports chosen figures, a forward costing more or less for each batch
norm that ran folded, each fused GEMM that ran for a group of linears, and each call a kernel took.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.routing import bn_folding, linear_concat, plugin  # noqa: E402
from autokernel.routing.outputs import output_error, tolerance  # noqa: E402
from autokernel.verify import handover, latency, route_table, rewrites  # noqa: E402
from autokernel.verify.latency import Latency  # noqa: E402
from tests.plugin_helpers import write_optimized  # noqa: E402
from tests.test_plugin import reference_sources  # noqa: E402

FOLD, CONCAT = rewrites.BATCH_NORM_FOLDING, rewrites.LINEAR_CONCAT


class ConvNet(nn.Module):
    """conv -> batch norm -> ReLU, then a linear head (which the stand-in matmul kernel takes)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.fc = nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Linear(64, 8)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


class TwoHeads(ConvNet):
    """ConvNet with two heads on the linear's output: two linears that read one input."""

    def __init__(self):
        super().__init__()
        self.head_a, self.head_b = nn.Linear(8, 4), nn.Linear(8, 6)

    def forward(self, x):
        h = super().forward(x)
        return self.head_a(h), self.head_b(h)


@pytest.fixture
def timer(monkeypatch):
    """Each forward 10 ms, plus `per_hit_ms` per kernel call, `per_fold_ms` per batch norm that ran folded and
    `per_concat_ms` per group of linears that ran as one GEMM."""
    state = {"model": None, "per_hit_ms": 0.5, "per_fold_ms": -1.0, "per_concat_ms": -1.0}

    def wall_clock(fn, on_gpu, **_):
        router, folding = plugin.router_of(state["model"]), bn_folding.folding_of(state["model"])
        concat = linear_concat.concat_of(state["model"])
        hits_before = sum(s.hits for s in router.stats.values()) if router else 0
        folds_before, concat_before = folding.hits if folding else 0, concat.hits if concat else 0
        fn()
        hits = (sum(s.hits for s in router.stats.values()) if router else 0) - hits_before
        folds = (folding.hits if folding else 0) - folds_before
        fused = (concat.hits if concat else 0) - concat_before
        ms = 10.0 + state["per_hit_ms"] * hits + state["per_fold_ms"] * folds + state["per_concat_ms"] * fused
        return Latency(ms, ms * 0.999, ms * 1.001, 5)

    def time_site(site, record, router):
        record.ours_us, record.pytorch_us = 5.0, 10.0
        record.route_eager, record.why = True, "eager: faster: 2.00x"
    monkeypatch.setattr(latency, "wall_clock", wall_clock)
    monkeypatch.setattr(route_table, "_time_site", time_site)
    return state


def compare(tmp_path, state, policy="measured", net=ConvNet):
    model, inputs = net().eval(), (torch.randn(1, 2, 4, 4),)
    state["model"] = model
    folder = write_optimized(tmp_path / "opt", {"matmul": [{"M": 1, "N": 8, "K": 64}]},
                             sources=reference_sources("matmul"))
    compared, _ = handover.compare(model, inputs, folder, on_gpu=True, compile_backend=None, policy=policy)
    return model, inputs, folder, compared


def test_a_fold_that_makes_the_model_faster_is_kept_and_handed_over(tmp_path, timer):
    model, inputs, folder, report = compare(tmp_path, timer)
    trials = [(t["kernel"], t["mode"], t["kept"]) for t in report["selection"]]
    assert trials == [("1_matmul", "eager", False), (FOLD.name, "eager", True)]
    fold_row = next(row for row in report["route_table"] if row["kernel"] == FOLD.name)
    assert fold_row["site"] == "fold bn into conv" and fold_row["route_eager"]
    assert report["routing"][FOLD.report_key] == {"folds": ["bn into conv"], "rejected": {}, "eager": True,
                                                      "compiled": False}
    verdict = report["verdict"]
    assert verdict["faster"] and verdict["use"] == "ours" and verdict["batch_norm_folding"]
    assert verdict["use_code"] == "autokernel.fold_batch_norms(model, inputs); autokernel.plug_in(model)"
    assert report["checked"]["passed"]
    # The comparison leaves the model as it found it; the path handed over is folded again.
    assert bn_folding.folding_of(model) is None and "forward" not in model.bn.__dict__
    with torch.no_grad():
        expected = model(*inputs)
    handed = handover.runnable(model, folder, verdict, inputs)
    with torch.no_grad():
        assert output_error(expected, handed(*inputs)) <= tolerance(expected)
    assert [f.label for f in bn_folding.folding_of(model).folds] == ["bn into conv"]
    with pytest.raises(ValueError, match="sample inputs"):
        handover.runnable(model, folder, verdict)


def test_a_fold_that_slows_the_model_is_dropped_and_not_handed_over(tmp_path, timer):
    timer["per_hit_ms"], timer["per_fold_ms"] = -0.5, 1.0
    model, inputs, folder, report = compare(tmp_path, timer)
    assert [(t["kernel"], t["kept"]) for t in report["selection"]] == [("1_matmul", True), (FOLD.name, False)]
    assert "eager route dropped end to end" in next(
        row for row in report["route_table"] if row["kernel"] == FOLD.name)["why"]
    verdict = report["verdict"]
    assert verdict["use"] == "ours" and not verdict["batch_norm_folding"]
    assert verdict["use_code"] == "autokernel.plug_in(model)"


def test_under_the_all_policy_the_fold_stays_off_so_the_kernels_are_checked(tmp_path, timer):
    model, inputs, folder, report = compare(tmp_path, timer, policy="all")
    assert report["selection"] == []
    assert report["routing"][FOLD.report_key]["eager"] is False
    assert next(row for row in report["route_table"] if row["kernel"] == FOLD.name)["why"] == rewrites.OFF_UNDER_ALL
    assert not report["verdict"]["batch_norm_folding"]


@pytest.mark.parametrize("per_concat_ms", [-1.0, 1.0])
def test_linears_concatenated_are_a_route_of_their_own_kept_only_where_faster(tmp_path, timer, per_concat_ms):
    timer["per_concat_ms"] = per_concat_ms
    model, inputs, folder, report = compare(tmp_path, timer, net=TwoHeads)
    faster = per_concat_ms < 0
    assert [(t["kernel"], t["kept"]) for t in report["selection"]] == [
        ("1_matmul", False), (FOLD.name, True), (CONCAT.name, faster)]
    row = next(row for row in report["route_table"] if row["kernel"] == CONCAT.name)
    assert row["site"] == "concat head_a + head_b" and row["route_eager"] is faster
    assert report["routing"][CONCAT.report_key] == {"groups": ["head_a + head_b"], "rejected": {}, "eager": faster,
                                                    "compiled": False}
    verdict = report["verdict"]
    assert verdict["batch_norm_folding"] and verdict["linear_concat"] is faster
    assert verdict["use_code"] == "; ".join([FOLD.use_code, *[CONCAT.use_code] * faster, "autokernel.plug_in(model)"])
    # The comparison leaves the model as it found it (its weights in storage of their own); the path handed over
    # is rewritten again.
    assert linear_concat.concat_of(model) is None and "forward" not in model.head_a.__dict__
    assert model.head_a.weight.untyped_storage().data_ptr() != model.head_b.weight.untyped_storage().data_ptr()
    with torch.no_grad():
        expected = model(*inputs)
    handed = handover.runnable(model, folder, verdict, inputs)
    with torch.no_grad():
        assert all(output_error(e, a) <= tolerance(e) for e, a in zip(expected, handed(*inputs)))
    assert (linear_concat.concat_of(model) is not None) is faster


def test_the_route_table_names_the_first_rewrites_and_counts_the_rest():
    assert rewrites._site("concat", ["a + b", "c + d", "e + f", "g + h"]) == "concat a + b, c + d and 2 more"
    assert rewrites._site("fold", ["bn into conv"]) == "fold bn into conv"
