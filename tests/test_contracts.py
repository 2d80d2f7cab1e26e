"""Tests for autokernel/core/contracts.py: every record round-trips through the JSON file its stage really writes
(the plan, jobs.json, bench.py's result, the manifest, state.json), and a malformed one is refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel.agents.base import SearchExhausted
from autokernel.core import paths
from autokernel.core.contracts import (PASS, VERDICTS, BenchResult, ContractError, Job, JudgedResult, JudgeOutcome,
                                        KeptVersion, ManifestEntry, PlanEntry, RunSettings)
from autokernel.core.run_records import RunState
from autokernel.core.live import ProgressView
from autokernel.core.plan import Plan, PlanError, read_plan
from autokernel.profile import jobs as kernel_jobs, profiler
from autokernel.search import gitops, loop, run_state
from autokernel.search.budget import Budget
from tests.loop_helpers import ScriptedAgent, fake_run_bench, make_job, make_project, proposal, result, source
from tests.test_jobs import SoftmaxHead

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A workspace the profiler and extract wrote, from a small model on CPU."""
    folder = tmp_path_factory.mktemp("workspace")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        profiler.profile_to_workspace(SoftmaxHead(), (torch.randn(3, 5, 16),), name="head", workspace=folder,
                                      warmup=1, iters=1)
    finally:
        torch.set_num_threads(threads)
    kernel_jobs.extract_jobs(folder / profiler.PLAN_FILE, 5, folder)
    return folder


def test_plan_entries_round_trip_through_the_plan_the_profiler_writes(workspace):
    entries = json.loads((workspace / profiler.PLAN_FILE).read_text())["entries"]
    # The head's GEMM with its softmax is one region of the graph (issue 25), its entry carrying the region's record.
    assert any(entry["kernel_type"].startswith("region_") and "region" in entry for entry in entries)
    for entry in entries:
        record = PlanEntry.from_json(entry)
        assert record.to_json() == entry and record.shapes and record.rank >= 1


def test_the_plan_round_trips_through_the_file_the_profiler_writes(workspace):
    written = json.loads((workspace / profiler.PLAN_FILE).read_text())
    plan = read_plan(workspace / profiler.PLAN_FILE)
    assert isinstance(plan, Plan) and plan.to_json() == written       # every key kept, the policies' among them
    assert plan.model == "head" and plan.regions["found"] >= 1 and "fold_policy" in plan.extra
    assert plan.shares() == {entry.kernel_type: entry.share for entry in plan.entries}
    # What is not a plan is refused by name, and read_plan says what to do.
    for broken, why in (({"model": "m"}, "no \"entries\" list"), ({"entries": []}, "needs model, device, dtype"),
                        ({**written, "entries": [{"kernel_type": "softmax"}]}, "a PlanEntry needs")):
        with pytest.raises(ContractError, match=why):
            Plan.from_json(broken)
    (workspace / "broken_plan.json").write_text(json.dumps({"model": "m"}))
    with pytest.raises(PlanError, match="not an optimization plan .* run profile.py again"):
        read_plan(workspace / "broken_plan.json")


def test_jobs_round_trip_through_jobs_json(workspace):
    written = json.loads((workspace / kernel_jobs.JOBS_FILE).read_text())
    jobs = kernel_jobs.read_jobs(workspace)
    assert [job.to_json() for job in jobs] == written
    # The region's job, or, where Inductor's CPU backend has no GEMM template for a GEMM this small, the menu's jobs
    # for the calls the region took (autokernel/profile/jobs.py).
    planned = {entry["kernel_type"] for entry in json.loads((workspace / profiler.PLAN_FILE).read_text())["entries"]}
    assert {job.kernel_type for job in jobs} in (planned, {"matmul", "softmax"})
    assert all(Path(job.path).is_file() and job.name == f"{job.rank}_{job.kernel_type}" for job in jobs)
    assert all(isinstance(job, Job) and job.bench_args[-2:] == ["--dtype", job.dtype] for job in jobs)


@pytest.mark.slow
def test_bench_result_round_trips_through_the_json_bench_writes(tmp_path):
    out = tmp_path / "result.json"
    kernel = tmp_path / "kernel.py"
    kernel.write_text(paths.starter_path("softmax").read_text())
    done = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(kernel), "--shape", "M=4,N=64",
                           "--dtype", "float32", "--quick", "--json-out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    written = json.loads(out.read_text())
    record = BenchResult.from_json(written)
    assert record.correctness == PASS and done.returncode == 0, done.stdout[-2000:]
    assert record.to_json() == written
    assert record.kernel_type == "softmax" and record.stages and record.timings


def test_manifest_and_state_round_trip_through_the_files_the_loop_writes(tmp_path, monkeypatch):
    project = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    repo = gitops.KernelRepo(project)
    repo.start_branch("contracts")
    jobs = [make_job(project, 1, source(result(100.0)))]
    agent = ScriptedAgent(proposal("faster", source(result(40.0))), SearchExhausted("done"))
    state = RunState(tag="contracts", jobs=jobs, kept_commit=repo.head(), settings=RunSettings(target_speedup=2.0))
    loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                         budget=Budget(state.settings.budget_s)).run()

    entries = json.loads(paths.MANIFEST_FILE.read_text())["kernels"]
    assert list(entries) == ["1_softmax"]
    record = ManifestEntry.from_json(entries["1_softmax"])
    assert record.to_json() == entries["1_softmax"]
    assert (record.file, record.kernel_type, record.rank, record.dtypes) == ("1_softmax.py", "softmax", 1, ["float32"])
    assert "stopped_because" in record.extra

    written = json.loads(run_state.state_file().read_text())
    saved = RunState.from_json(written)
    assert saved.to_json() == written and saved == run_state.load()
    assert saved.done and saved.jobs == jobs and saved.finished[0]["file"] == "1_softmax.py"


def test_records_say_what_is_missing_or_wrong():
    with pytest.raises(ContractError, match="a Job needs rank"):
        Job.from_json({"kernel_type": "softmax", "dtype": "float16", "shapes": [], "path": "k.py"})
    with pytest.raises(ContractError, match="a Job has no gpu"):
        Job.from_json({"rank": 1, "kernel_type": "softmax", "dtype": "float16", "shapes": [], "path": "k.py",
                       "gpu": "H100"})
    with pytest.raises(ContractError, match="correctness is one of PASS, FAIL, CRASH, TIMEOUT"):
        BenchResult.from_json({"correctness": "pass"})
    with pytest.raises(ContractError, match="a ManifestEntry needs dtypes"):
        ManifestEntry.from_json({"file": "a.py", "kernel_type": "softmax", "rank": 1, "shapes": []})
    with pytest.raises(ContractError, match="JSON object"):
        PlanEntry.from_json(["not", "an", "entry"])
    with pytest.raises(ContractError, match="a BenchResult needs correctness"):
        JudgedResult.from_json({"latency_us": 1.0, "wins_at": []})
    with pytest.raises(ContractError, match="a KeptVersion needs result"):
        KeptVersion.from_json({"commit": "abc"})
    with pytest.raises(ContractError, match="correctness is one of"):
        JudgeOutcome.from_json({"result": {"correctness": "OK"}, "gpu": "gpu0", "seconds": 1.0})
    assert VERDICTS == ("PASS", "FAIL", "CRASH", "TIMEOUT")


def test_a_judge_workers_outcome_crosses_the_pipe_as_json_and_arrives_a_bench_result():
    result = BenchResult(PASS, kernel_type="softmax", latency_us=12.5, timings=[{"shape": "M=4,N=64"}],
                         extra={"newer_field": 1})
    outcome = JudgeOutcome(result=result, gpu="gpu1", seconds=3.0, bench_seconds={"quick": 2.5})
    line = json.dumps(outcome.to_json())
    assert json.loads(line)["result"] == result.to_json() and "extra" not in json.loads(line)["result"]
    back = JudgeOutcome.from_json(json.loads(line))
    assert back == outcome and isinstance(back.result, BenchResult) and back.result.extra == {"newer_field": 1}


def test_open_records_keep_keys_they_do_not_know():
    entry = {"file": "1_softmax.py", "kernel_type": "softmax", "rank": 1, "shapes": [{"M": 4, "N": 64}],
             "dtypes": ["float16"], "route_table": {"device": "H100", "records": []}, "verdict": "winner"}
    record = ManifestEntry.from_json(entry)
    assert record.extra == {"route_table": {"device": "H100", "records": []}, "verdict": "winner"}
    assert record.to_json() == entry
    job = Job(rank=2, kernel_type="rmsnorm", dtype="bfloat16", shapes=[{"M": 8, "N": 32}], path="k.py")
    assert ManifestEntry.for_job(job, "2_rmsnorm.py").to_json() == {
        "file": "2_rmsnorm.py", "kernel_type": "rmsnorm", "rank": 2, "shapes": [{"M": 8, "N": 32}],
        "dtypes": ["bfloat16"]}


def test_the_default_gpus_setting_reads_as_what_this_machine_has(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert RunSettings().show("gpus") == "1 (no GPU here: one judge in Triton's interpreter)"
    assert "every visible GPU" not in RunSettings().describe()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert RunSettings().show("gpus") == "every visible GPU (8)" and RunSettings(gpus=2).show("gpus") == "2"
