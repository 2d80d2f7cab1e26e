"""Tests for autokernel/profile/profiler.py: the report's totals, the recorded inputs, Amdahl ranking, plan outputs."""

import json
import math

import pytest
import torch
from rich.console import Console

from autokernel.core import hardware
from autokernel.core.plan import read_plan
from autokernel.kernel_types import registry
from autokernel.profile import profiler
from autokernel.profile.profiler import CallSite, ProfileReport
# The profiled tiny Llama is shared with the attribution tests.
from tests.test_classify import BATCH, SEQ, llama_report, one_thread  # noqa: F401


def test_coverage_and_totals_add_up(llama_report):
    assert llama_report.coverage >= profiler.COVERAGE_TARGET
    assert math.isclose(llama_report.coverage, 1.0, rel_tol=1e-6)      # on CPU every op time is attributed
    assert math.isclose(sum(row.time_ms for row in llama_report.ops), llama_report.total_ms, rel_tol=1e-6)
    assert llama_report.total_ms > 0 and llama_report.wall_ms > 0
    assert (llama_report.device, llama_report.dtype, llama_report.iterations) == ("cpu", "float32", 2)
    assert llama_report.inputs == [{"shape": [BATCH, SEQ], "dtype": "int64"}]


def test_inputs_are_described_by_shape_and_dtype_of_each_tensor():
    inputs = (torch.zeros(2, 3, dtype=torch.float16), 7, torch.ones(5, dtype=torch.bool))
    assert profiler.describe_inputs(inputs) == [{"shape": [2, 3], "dtype": "float16"}, {"shape": [5], "dtype": "bool"}]
    assert profiler.describe_inputs(()) == []


def test_amdahl_speedup_exact_values():
    assert profiler.amdahl_speedup(0.5) == pytest.approx(4 / 3)
    assert profiler.amdahl_speedup(0.0) == 1.0
    assert profiler.amdahl_speedup(1.0) == 2.0
    assert profiler.amdahl_speedup(0.2) == pytest.approx(1 / 0.9)
    assert profiler.amdahl_speedup(0.5, factor=4.0) == pytest.approx(1 / 0.625)


def _handmade_report(device="cpu"):
    big = {"M": 4096, "N": 4096, "K": 4096}
    small = {"M": 64, "N": 64, "K": 64}
    norm = {"M": 8192, "N": 4096}
    sites = [CallSite("matmul", "a", big, 2, 3.0, ["aten::linear"]),
             CallSite("rmsnorm", "n", norm, 1, 2.0, ["aten::rsqrt"]),
             CallSite("matmul", "b", small, 1, 0.5, ["aten::mm"]),
             CallSite("matmul", "c", small, 1, 0.5, ["aten::mm"])]
    return ProfileReport(model_name="handmade", device=device, device_name="test", dtype="float16",
                         inputs=[{"shape": [1, 8], "dtype": "int64"}], timing="test time", iterations=1,
                         total_ms=10.0, wall_ms=12.0, ops=[], call_sites=sites, other_ms=3.5)


def test_plan_ranks_by_time_with_exact_shares_and_amdahl():
    plan = profiler.build_plan(_handmade_report(), hardware.lookup("H100"))
    first, second = plan.entries
    assert (first.rank, first.kernel_type, second.rank, second.kernel_type) == (1, "matmul", 2, "rmsnorm")
    assert first.time_ms == pytest.approx(4.0) and first.share == pytest.approx(0.4)
    assert first.amdahl_2x == pytest.approx(1 / (0.6 + 0.2))
    assert second.share == pytest.approx(0.2) and second.amdahl_2x == pytest.approx(1 / 0.9)
    # Shapes merge across call sites and come most time first.
    assert first.shapes == [{"M": 4096, "N": 4096, "K": 4096}, {"M": 64, "N": 64, "K": 64}]
    assert first.shape_times_ms == pytest.approx([3.0, 1.0])
    assert first.calls == 4 and first.module_paths == ["a", "b", "c"]
    assert (plan.other_ms, plan.other_share) == (3.5, pytest.approx(0.35))
    assert plan.to_json()["other"] == {"time_ms": 3.5, "share": pytest.approx(0.35)}
    assert plan.coverage == pytest.approx(0.95)
    assert (plan.dtype, plan.gpu, plan.model) == ("float16", "NVIDIA H100 SXM", "handmade")
    assert plan.inputs == [{"shape": [1, 8], "dtype": "int64"}]


def test_plan_places_entries_on_the_gpu_roofline():
    plan = profiler.build_plan(_handmade_report(), hardware.lookup("H100"))
    bounds = {entry.kernel_type: entry.bound for entry in plan.entries}
    assert bounds == {"matmul": "compute", "rmsnorm": "memory"}
    assert all(entry.pct_peak is None for entry in plan.entries)     # CPU times say nothing about a GPU
    on_gpu = profiler.build_plan(_handmade_report(device="cuda"), hardware.lookup("H100"))
    norm = next(entry for entry in on_gpu.entries if entry.kernel_type == "rmsnorm")
    moved_gb = registry.get("rmsnorm").bytes_moved({"M": 8192, "N": 4096}, 2) / 1e9
    assert norm.pct_peak == pytest.approx(100 * moved_gb / 2e-3 / 3350.0)
    no_gpu = profiler.build_plan(_handmade_report(), hardware.CPU_INTERPRETER)
    assert {entry.bound for entry in no_gpu.entries} == {None}


def test_outputs_are_written_and_printed(llama_report, tmp_path):
    plan = profiler.build_plan(llama_report, hardware.CPU_INTERPRETER)
    report_path, plan_path = profiler.write_outputs(llama_report, plan, tmp_path / "ws")
    saved_report, saved_plan = json.loads(report_path.read_text()), json.loads(plan_path.read_text())
    assert saved_report["total_ms"] == pytest.approx(llama_report.total_ms)
    assert saved_report["coverage"] >= profiler.COVERAGE_TARGET
    assert {row["kernel_type"] for row in saved_report["ops"]} >= {"rmsnorm", "rotary_embedding", "other"}
    assert all({"op", "input_shapes", "time_ms", "calls", "module_paths"} <= set(row) for row in saved_report["ops"])
    assert saved_plan["inputs"] == saved_report["inputs"] == [{"shape": [BATCH, SEQ], "dtype": "int64"}]
    assert [entry["rank"] for entry in saved_plan["entries"]] == list(range(1, len(saved_plan["entries"]) + 1))
    times = [entry["time_ms"] for entry in saved_plan["entries"]]
    assert times == sorted(times, reverse=True)
    assert sum(times) + saved_plan["other"]["time_ms"] >= profiler.COVERAGE_TARGET * saved_plan["total_ms"]
    assert read_plan(plan_path) == plan          # the file holds the plan whole: read back, it is the same record
    console = Console(record=True, width=160)
    profiler.print_plan(read_plan(plan_path), top=2, console=console)
    text = console.export_text()
    assert saved_plan["entries"][0]["kernel_type"] in text and "coverage: 100.0%" in text
    assert saved_plan["entries"][2]["kernel_type"] not in text      # only the top 2 rows are shown


class _PaddedEncoder(torch.nn.Module):
    """nn.TransformerEncoder given a padding mask: in eval mode its fast path packs the batch into a nested tensor,
    and its layers are called with it."""

    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)

    def forward(self, x):
        padding = torch.zeros(x.shape[:2], dtype=torch.bool)
        padding[:, -2:] = True
        return self.encoder(x, src_key_padding_mask=padding)


def test_a_module_called_with_a_nested_tensor_is_profiled():
    # Before: "NestedTensorImpl doesn't support sizes" when the module's range was named by its input's shape,
    # and the whole profile was dropped.
    model = _PaddedEncoder().eval()
    report = profiler.profile_model(model, (torch.randn(2, 6, 16),), warmup=1, iters=1)
    assert report.total_ms > 0 and report.inputs == [{"shape": [2, 6, 16], "dtype": "float32"}]


class _WithScriptedBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()))
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.norm(self.block(x)))


def test_a_model_with_a_torchscript_block_is_profiled_around_it():
    # Before: "register_forward_pre_hook is not supported on ScriptModules" (then, from the norm folding search's
    # cleanup, "list.remove(x): x not in list"), and the whole profile was dropped.
    report = profiler.profile_model(_WithScriptedBlock().eval(), (torch.randn(4, 16),), warmup=1, iters=1)
    assert report.total_ms > 0
    assert any(site.module_path == "head" for site in report.call_sites)
