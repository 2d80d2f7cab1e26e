"""Tests for autokernel/verify/containment.py: a failure at any stage of verify drops its unit, never the verdict.

Each test injects a failure at one stage (a profile, a starter's generation, a kernel's import, a route that breaks
the forward, a figure, the sandboxed child itself) and checks that verify still ends with PyTorch's best named,
the unit dropped with its reason, and the exit code saying so.
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from rich.console import Console  # noqa: E402

from autokernel.core.paths import ROOT  # noqa: E402
from autokernel.verify import containment, endtoend, handover, route_table, verification  # noqa: E402
from autokernel.verify.containment import Drops  # noqa: E402
from tests.plugin_helpers import write_optimized  # noqa: E402
from tests.test_plugin import LLAMA_KWARGS, LLAMA_SHAPES, SEQ, reference_kernel, tiny_llama  # noqa: E402

REFERENCE_SOURCES = {"rmsnorm": reference_kernel("rmsnorm"), "matmul": reference_kernel("matmul")}


@pytest.fixture
def matmul_breaks_the_forward(monkeypatch):
    """A route that breaks the model's whole forward whenever a matmul kernel is plugged in, as a region's graph
    rewrite did on the GPU (KeyError: relu_1 in legalize_graph); a kernel's own error at a call falls back there."""
    from autokernel.routing.router import Router

    real = Router.run_model

    def run_model(self, *args, **kwargs):
        if "matmul" in self.by_type:
            raise KeyError("the injected failure of a route")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Router, "run_model", run_model)
BROKEN_AT_IMPORT = 'raise ImportError("the injected failure of an import")\n'


def _compare(folder, **keywords):
    model, inputs = tiny_llama()
    drops = Drops()
    compared, _ = handover.compare(model, inputs, folder, on_gpu=False, compile_backend=None, drops=drops,
                                   **keywords)
    return compared, drops


def _kernels(compared) -> dict:
    return {kernel["name"]: kernel for kernel in compared["checked"]["kernels"]}


def test_a_kernel_that_breaks_the_forward_is_dropped_and_the_others_are_still_checked(tmp_path,
                                                                                      matmul_breaks_the_forward):
    folder = write_optimized(tmp_path / "kernels", {"rmsnorm": LLAMA_SHAPES["rmsnorm"],
                                                     "matmul": LLAMA_SHAPES["matmul"]}, sources=REFERENCE_SOURCES)
    compared, drops = _compare(folder)
    assert [(d.stage, d.unit) for d in drops] == [(containment.CHECK, "2_matmul")]
    assert "the injected failure of a route" in drops[0].reason
    assert list(_kernels(compared)) == ["1_rmsnorm"] and _kernels(compared)["1_rmsnorm"]["hits"] > 0
    assert compared["checked"]["passed"] and compared["verdict"]["pytorch_best"]["variant"] == "eager"


def test_a_kernel_that_runs_but_puts_the_model_over_its_tolerance_is_dropped_and_the_others_still_checked(tmp_path):
    # On the GPU (session 17) float32 convolution starters put their problems at 3e-4 where float32 allows 1e-4:
    # the row said "not correct" with PyTorch's path handed over; now the kernel is dropped with its error.
    off = reference_kernel("matmul", body="reference.matmul(*args) * 1.01")
    folder = write_optimized(tmp_path / "kernels", {"rmsnorm": LLAMA_SHAPES["rmsnorm"],
                                                     "matmul": LLAMA_SHAPES["matmul"]},
                             sources={"rmsnorm": reference_kernel("rmsnorm"), "matmul": off})
    compared, drops = _compare(folder)
    assert [(d.stage, d.unit) for d in drops] == [(containment.CHECK, "2_matmul")]
    assert "over the tolerance" in drops[0].reason and "with it alone routed" in drops[0].reason
    assert list(_kernels(compared)) == ["1_rmsnorm"] and compared["checked"]["passed"]


def test_a_kernel_file_that_does_not_import_is_dropped_at_load(tmp_path):
    folder = write_optimized(tmp_path / "kernels", {"rmsnorm": LLAMA_SHAPES["rmsnorm"],
                                                     "matmul": LLAMA_SHAPES["matmul"]},
                             sources={"rmsnorm": reference_kernel("rmsnorm"), "matmul": BROKEN_AT_IMPORT})
    compared, drops = _compare(folder)
    assert [(d.stage, d.unit) for d in drops] == [(containment.LOAD, "2_matmul")]
    assert "the injected failure of an import" in drops[0].reason
    assert list(_kernels(compared)) == ["1_rmsnorm"]


def test_with_every_kernel_broken_the_verdict_is_pytorchs_best_and_nothing_is_said_checked(
        tmp_path, matmul_breaks_the_forward):
    folder = write_optimized(tmp_path / "kernels", {"matmul": LLAMA_SHAPES["matmul"]}, sources=REFERENCE_SOURCES)
    compared, drops = _compare(folder)
    assert [d.unit for d in drops] == ["1_matmul"]
    assert compared["checked"]["kernels"] == []
    assert compared["verdict"]["use"] == "eager" and not compared["verdict"]["faster"]
    assert compared["variants"]["ours"]["failed"].startswith("no kernel of ours ran")


def test_a_figure_that_raises_is_dropped_and_the_comparison_goes_on(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("the injected failure of a figure")
    monkeypatch.setattr(endtoend, "_headroom", broken)
    folder = write_optimized(tmp_path / "kernels", {"rmsnorm": LLAMA_SHAPES["rmsnorm"]},
                             sources={"rmsnorm": reference_kernel("rmsnorm")})
    compared, drops = _compare(folder)
    assert [(d.stage, d.reason) for d in drops] == [(containment.HEADROOM,
                                                     "ValueError: the injected failure of a figure")]
    assert _kernels(compared)["1_rmsnorm"]["hits"] > 0


def test_a_route_table_timing_that_raises_leaves_its_signature_unrouted(monkeypatch):
    class Site:
        shape, dtype, label, calls = {"M": 8, "N": 64}, None, "layers.0.norm", 3
        kernel = type("Kernel", (), {"name": "1_rmsnorm"})()
        run_ours = run_pytorch = staticmethod(lambda: None)

    def broken(*args):
        raise RuntimeError("the injected failure of a timing")
    monkeypatch.setattr(route_table, "_time_site", broken)
    monkeypatch.setattr(route_table, "dtype_name", lambda dtype: "float16")
    drops = Drops()
    records = route_table.measure(type("Router", (), {"sites": {1: Site()}})(), True, drops=drops)
    record = records["1_rmsnorm"][0]
    assert not record.route_eager and not record.route_compiled and "injected failure" in record.why
    assert [(d.stage, d.unit) for d in drops] == [(containment.ROUTE_TABLE, "1_rmsnorm at {'M': 8, 'N': 64}")]


def test_a_starter_that_cannot_be_generated_is_dropped_and_the_others_kept(tmp_path, monkeypatch):
    from autokernel.profile.regions import jobs as region_jobs

    plan = _plan_of_tiny_llama(tmp_path)
    broken_type = plan.entries[0].kernel_type
    real = region_jobs.starter_file

    def broken(kernel_type, folder, log):
        if kernel_type == broken_type:
            raise KeyError("the injected failure of a starter")
        return real(kernel_type, folder, log)
    monkeypatch.setattr(region_jobs, "starter_file", broken)
    drops = Drops()
    entries = verification.starter_entries(plan, tmp_path / "starters", drops)
    assert [(d.stage, d.unit) for d in drops] == [(containment.STARTER, broken_type)]
    assert len(entries) == len(plan.entries) - 1 and not any(name.endswith(f"_{broken_type}") for name in entries)


def test_how_a_starters_variants_were_judged_is_said_on_verifys_log(tmp_path, monkeypatch):
    from autokernel.profile.regions import jobs as region_jobs

    plan = _plan_of_tiny_llama(tmp_path)
    real = region_jobs.starter_source

    def judged(kernel_type, *args, log=lambda line: None, **kwargs):      # as a GPU's pick logs its verdicts
        log(f"{kernel_type}: inductor PASS 713.0 us; gemm_engine PASS 390.0 us")
        return real(kernel_type, *args, log=log, **kwargs)
    monkeypatch.setattr(region_jobs, "starter_source", judged)
    lines = []
    verification.starter_entries(plan, tmp_path / "starters", Drops(lines.append))
    regions = [e.kernel_type for e in plan.entries if "region" in e.kernel_type]
    assert regions and all(f"{name}: inductor PASS 713.0 us; gemm_engine PASS 390.0 us" in lines for name in regions)


def _plan_of_tiny_llama(tmp_path):
    from autokernel.profile import profiler

    model, inputs = tiny_llama()
    _, plan = profiler.profile_to_workspace(model, inputs, name="llama.py:Model", workspace=tmp_path / "profile")
    return plan


def test_a_profile_that_fails_still_ends_with_pytorchs_verdict_and_its_own_exit_code(tmp_path, monkeypatch):
    from autokernel.profile import models, profiler

    def broken(*args, **kwargs):
        raise RuntimeError("the injected failure of a profile")
    monkeypatch.setattr(profiler, "profile_to_workspace", broken)
    loaded = models.load_model(ROOT / "models" / "llama.py", input_shape=(1, SEQ), model_kwargs=LLAMA_KWARGS,
                               device="cpu")
    out = tmp_path / "out"
    out.mkdir()
    outcome = verification.run(loaded, workspace=tmp_path / "ws", out=out, optimized_dir=None, starters=True,
                               compile_backend=None, policy="measured", overhead=False, console=Console(quiet=True))
    assert outcome.exit_code == verification.EXIT_DROPPED
    assert [d["stage"] for d in outcome.report.dropped] == [containment.PROFILE]
    assert outcome.report.verdict.pytorch_best["variant"] == "eager"
    assert json.loads((out / verification.REPORT_FILE).read_text())["dropped"][0]["reason"].endswith(
        "the injected failure of a profile")


@pytest.mark.slow
def test_a_kernel_that_kills_the_sandboxed_check_leaves_pytorchs_verdict_with_every_kernel_dropped(tmp_path):
    """The hardest failure: the child dies (as a device-side assert or a segfault kills it). The parent compares
    PyTorch's own paths alone in a fresh child, and the report says what was dropped and why."""
    killer = reference_kernel("rmsnorm") + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    folder = write_optimized(tmp_path / "kernels", {"rmsnorm": LLAMA_SHAPES["rmsnorm"]}, sources={"rmsnorm": killer})
    workspace = tmp_path / "ws"
    cmd = [sys.executable, str(ROOT / "verify.py"), str(ROOT / "models" / "llama.py"), "--input-shape", f"1,{SEQ}",
           *(x for name, value in LLAMA_KWARGS.items() for x in ("--model-arg", f"{name}={value}")),
           "--device", "cpu", "--no-compile", "--optimized-dir", str(folder), "--workspace", str(workspace)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == verification.EXIT_DROPPED, proc.stdout + proc.stderr
    report = json.loads((workspace / verification.REPORT_FILE).read_text())
    assert report["dropped"][0]["stage"] == containment.SANDBOX
    assert "killed by signal SIGKILL" in report["dropped"][0]["reason"]
    assert report["verdict"]["pytorch_best"]["variant"] == "eager"
    assert "comparing PyTorch's own paths alone" in proc.stderr


def test_a_sandbox_that_hides_the_gpu_stops_verify_with_the_error_instead_of_the_interpreter(tmp_path):
    """On the H200 a sandbox piece broke CUDA's initialization, and verify's child quietly ran every model in Triton's
    interpreter until its time ran out. Where the parent sees a GPU, a child that cannot use it says so and stops."""
    from autokernel.verify import isolated

    env = {**os.environ, isolated.GPU_EXPECTED_VARIABLE: "1"}       # as the parent sets it where it sees a GPU
    cmd = [sys.executable, str(ROOT / "verify.py"), str(ROOT / "models" / "llama.py"), "--model-arg", "config=tiny",
           "--device", "cpu", "--no-compile", "--workspace", str(tmp_path / "ws")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == verification.EXIT_ERROR, proc.stdout + proc.stderr
    assert "is not usable inside verify's sandbox" in proc.stderr
    assert "comparing PyTorch's own paths alone" not in proc.stderr
