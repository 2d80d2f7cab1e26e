"""The plan is stable or labelled (issue 38, item 6): a region's time is the median of repeated measurements (more of
them where they spread), the shares add up to at most 100% (regions timed apart are scaled to fit the forward pass,
and the plan says so), and a plan profiled on CPU says so in its JSON, its table, the run's lines and status."""

from __future__ import annotations

import json
import os
import re

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from rich.console import Console  # noqa: E402

from autokernel.profile import profiler  # noqa: E402
from autokernel.profile.regions import plan as region_plan  # noqa: E402
from tests.regions.test_plan import plan_of  # noqa: E402


def test_steady_measurements_take_the_least_rounds_and_noisy_ones_more_the_median_either_way():
    steady = iter([10.0, 10.5, 10.2])
    assert region_plan.steady_ms(lambda: next(steady)) == (10.2, pytest.approx(0.5 / 10.2))
    asked = []
    noisy = [1.0, 30.0, 2.0, 2.2, 1.9, 2.1, 50.0, 99.0]

    def measure():
        asked.append(1)
        return noisy[len(asked) - 1]
    median, apart = region_plan.steady_ms(measure)
    assert len(asked) == region_plan.MAX_ROUNDS and median == 2.1 and apart > region_plan.NOISY_SPREAD


def test_a_region_still_noisy_after_every_round_is_named_with_its_ops_in_the_plans_caveats(tmp_path, monkeypatch):
    times = iter([0.001, 0.01] * 100)            # every round ten times the one before or after it
    monkeypatch.setattr(region_plan, "region_time_ms", lambda region, device: next(times))
    [noisy] = [caveat for caveat in plan_of(tmp_path).caveats if caveat.startswith("noisy")]
    # Named by its ops first (its name is a hash), with how far apart its times were.
    assert re.search(r"the times of gemm\+sigmoid\+sum \(region_[0-9a-f]+\), \d+% apart still spread", noisy), noisy
    assert f"over {region_plan.MAX_ROUNDS} rounds" in noisy


def test_regions_timed_past_the_forward_pass_are_scaled_to_fit_and_the_plan_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(region_plan, "region_time_ms", lambda region, device: 1000.0)   # far past the whole model
    plan = plan_of(tmp_path)
    added = sum(entry.share for entry in plan.entries) + plan.other_share
    assert added <= 1.0 + 1e-9 and added == pytest.approx(1.0, abs=0.01)
    assert any("scaled by" in caveat for caveat in plan.caveats)
    written = json.loads((tmp_path / profiler.PLAN_FILE).read_text())
    assert written["caveats"] == plan.caveats


def test_a_plan_profiled_on_cpu_says_so_in_its_json_and_its_table(tmp_path, monkeypatch):
    # Regions that fit in the forward pass by construction: timed for real on two cores busy with other tests, the
    # regions once read longer than their ops inside the model and were scaled (session 24), the test above's case.
    monkeypatch.setattr(region_plan, "region_time_ms", lambda region, device: 1e-6)
    plan = plan_of(tmp_path)
    assert plan.device == "cpu" and profiler.CPU_CAVEAT in plan.caveats
    assert not any("scaled by" in caveat for caveat in plan.caveats), "regions that fit are not scaled"
    assert sum(entry.share for entry in plan.entries) + plan.other_share <= 1.0 + 1e-9
    console = Console(record=True, width=400)
    profiler.print_plan(plan, console=console)
    assert "profiled on CPU" in console.export_text()
    assert profiler.CPU_CAVEAT in json.loads((tmp_path / profiler.PLAN_FILE).read_text())["caveats"]
