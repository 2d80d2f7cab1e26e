"""autokernel/profile/planning.py: what torch prints while a run plans its jobs (the profiler, and Inductor autotuning
the regions' GEMM starters as the jobs are extracted) goes to workspace/torch.log, not the terminal; the plan's own
lines still reach the run's log, in order, even when extraction fails."""

import sys

import pytest

from autokernel.core import paths
from autokernel.core.contracts import Job
from autokernel.core.errors import OptimizationError
from autokernel.core.live import TORCH_LOG
from autokernel.core.plan import Plan, write_plan
from autokernel.profile import jobs as kernel_jobs, planning, profiler


def test_torchs_output_while_planning_goes_to_the_profile_log_and_our_lines_to_the_run(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(paths, "WORKSPACE", tmp_path)
    def profile(*args, **kwargs):
        print("profiler table")
        write_plan(Plan(model="m", device="cpu", dtype="float32", entries=[], timing="CPU op time",
                        caveats=["profiled on CPU"]), tmp_path / profiler.PLAN_FILE)
    monkeypatch.setattr(profiler, "profile_to_workspace", profile)
    job = Job(rank=1, kernel_type="softmax", dtype="float32", shapes=[{"M": 4, "N": 8}], path="k.py", share=0.5)

    def extract(plan_path, top, folder, backend, log):
        print("AUTOTUNE mm(16x32, 32x48)")
        print("  triton_mm_1 0.0101 ms 100.0%", file=sys.stderr)
        log("no starter for region_ab: Inductor failed")
        return [job]

    monkeypatch.setattr(kernel_jobs, "extract_jobs", extract)
    said = []
    assert planning.jobs_from_profile(None, (), name="m", top=1, log=said.append) == [job]
    terminal = capfd.readouterr()
    assert "AUTOTUNE" not in terminal.out + terminal.err and "triton_mm_1" not in terminal.out + terminal.err
    written = (tmp_path / TORCH_LOG).read_text()
    assert "AUTOTUNE mm" in written and "triton_mm_1" in written and "profiler table" in written
    assert said[1] == "no starter for region_ab: Inductor failed"
    assert said[2].startswith("job rank 1: softmax (50.0% of the CPU op time") and said[3] == "the plan: profiled on CPU"

    monkeypatch.setattr(kernel_jobs, "extract_jobs", lambda *args, log: log("no starter for region_cd") or [])
    said.clear()
    with pytest.raises(OptimizationError, match="no kernel that AutoKernel can optimize"):
        planning.jobs_from_profile(None, (), name="m", top=1, log=said.append)
    assert said[-1] == "no starter for region_cd"
