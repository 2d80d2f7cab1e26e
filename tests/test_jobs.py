"""Tests for autokernel/profile/jobs.py (and its front door extract.py): kernel job files stamped with the model's
shapes, jobs.json, and bad plans."""

import ast
import json

import pytest
import torch
from torch import nn

from autokernel.core import hardware, paths
from autokernel.core.plan import PlanError
from autokernel.kernel_types import registry
from autokernel.kernel_types.regions.record import region_title
from autokernel.profile import extract_command as extract
from autokernel.profile import jobs as kernel_jobs, profiler

NORM_SHAPES = [{"M": 512, "N": 2048}, {"M": 1, "N": 2048}]
MATMUL_SHAPES = [{"M": 512, "N": 5632, "K": 2048}]
SOFTMAX_SHAPES = [{"M": 4096, "N": 512}]


def _plan(entries):
    return {"model": "llama.py:Model", "device": "cuda", "dtype": "float16", "total_ms": 10.0, "coverage": 1.0,
            "other": {"time_ms": 1.0, "share": 0.1}, "entries": entries}


def _entry(rank, kernel_type, shapes, share):
    return {"rank": rank, "kernel_type": kernel_type, "dtype": "float16", "shapes": shapes, "share": share,
            "amdahl_2x": profiler.amdahl_speedup(share), "time_ms": 10.0 * share}


@pytest.fixture
def plan_path(tmp_path):
    path = tmp_path / "optimization_plan.json"
    path.write_text(json.dumps(_plan([
        _entry(2, "rmsnorm", NORM_SHAPES, 0.3),
        _entry(1, "matmul", MATMUL_SHAPES, 0.5),
        _entry(3, "softmax", SOFTMAX_SHAPES, 0.05),
    ])))
    return path


def _job_literal(source: str) -> dict:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["JOB"]:
            return ast.literal_eval(node.value)
    raise AssertionError("no JOB literal")


def test_jobs_follow_rank(plan_path, tmp_path):
    jobs = kernel_jobs.extract_jobs(plan_path, 5, tmp_path / "ws")
    assert [(job.rank, job.kernel_type) for job in jobs] == [(1, "matmul"), (2, "rmsnorm"), (3, "softmax")]
    assert [job.path for job in jobs] == [str(tmp_path / "ws" / name) for name in
                                          ("kernel_1_matmul.py", "kernel_2_rmsnorm.py", "kernel_3_softmax.py")]
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == [
        "jobs.json", "kernel_1_matmul.py", "kernel_2_rmsnorm.py", "kernel_3_softmax.py"]


def test_top_limits_the_jobs(plan_path, tmp_path):
    jobs = kernel_jobs.extract_jobs(plan_path, 1, tmp_path / "ws")
    assert [job.kernel_type for job in jobs] == ["matmul"]
    assert not (tmp_path / "ws" / "kernel_2_rmsnorm.py").exists()
    with pytest.raises(ValueError, match="at least 1"):
        kernel_jobs.extract_jobs(plan_path, 0, tmp_path / "ws")


def test_job_file_is_the_starter_with_the_job_after_its_docstring(plan_path, tmp_path):
    kernel_jobs.extract_jobs(plan_path, 2, tmp_path / "ws")
    starter = paths.starter_path("rmsnorm").read_text()
    job_file = (tmp_path / "ws" / "kernel_2_rmsnorm.py").read_text()
    assert ast.get_docstring(ast.parse(job_file)) == ast.get_docstring(ast.parse(starter))
    assert _job_literal(job_file) == {
        "rank": 2, "kernel_type": "rmsnorm", "model": "llama.py:Model", "dtype": "float16", "shapes": NORM_SHAPES,
        "shape_args": ["M=512,N=2048", "M=1,N=2048"],
        "bench_args": ["--shape", "M=512,N=2048", "--shape", "M=1,N=2048", "--dtype", "float16"]}
    assert f"python bench.py --kernel {tmp_path / 'ws' / 'kernel_2_rmsnorm.py'} --shape M=512,N=2048" in job_file
    assert "30.0% of the measured time" in job_file
    # Around the inserted lines the file is the starter, byte for byte.
    docstring_end = starter.index('"""', 3) + len('"""\n')
    head, tail = starter[:docstring_end], starter[docstring_end:]
    assert job_file.startswith(head) and job_file.endswith(tail)
    inserted = job_file[len(head):len(job_file) - len(tail)]
    assert inserted.lstrip("\n").startswith("# Kernel job 2 for llama.py:Model: rmsnorm") and "JOB = {" in inserted


def test_job_file_still_names_its_kernel_type(plan_path, tmp_path):
    kernel_jobs.extract_jobs(plan_path, 5, tmp_path / "ws")
    for kernel_type, rank in (("matmul", 1), ("rmsnorm", 2), ("softmax", 3)):
        tree = ast.parse((tmp_path / "ws" / f"kernel_{rank}_{kernel_type}.py").read_text())
        assigned = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
        assert ast.literal_eval(assigned["KERNEL_TYPE"]) == kernel_type


def test_jobs_json_lists_the_exact_bench_strings(plan_path, tmp_path):
    kernel_jobs.extract_jobs(plan_path, 5, tmp_path / "ws")
    jobs = json.loads((tmp_path / "ws" / "jobs.json").read_text())
    norm = jobs[1]
    assert {key: norm[key] for key in ("rank", "kernel_type", "dtype", "shapes", "share")} == {
        "rank": 2, "kernel_type": "rmsnorm", "dtype": "float16", "shapes": NORM_SHAPES, "share": 0.3}
    assert norm["amdahl_2x"] == pytest.approx(1 / 0.85)
    assert norm["shape_args"] == ["M=512,N=2048", "M=1,N=2048"]
    assert [registry.parse_shape(text) for text in norm["shape_args"]] == norm["shapes"]
    assert jobs[0]["bench_args"] == ["--shape", "M=512,N=5632,K=2048", "--dtype", "float16"]


def test_bad_plans_give_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(PlanError, match="run `python profile.py MODEL` first"):
        kernel_jobs.extract_jobs(tmp_path / "missing.json", 3, tmp_path / "ws")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        kernel_jobs.extract_jobs(broken, 3, tmp_path / "ws")
    broken.write_text(json.dumps({"model": "x"}))
    with pytest.raises(PlanError, match="no \"entries\" list"):
        kernel_jobs.extract_jobs(broken, 3, tmp_path / "ws")
    broken.write_text(json.dumps(_plan([_entry(1, "conv2d", [{"M": 1}], 0.5)])))
    with pytest.raises(KeyError, match="unknown kernel type 'conv2d'"):
        kernel_jobs.extract_jobs(broken, 3, tmp_path / "ws")
    broken.write_text(json.dumps(_plan([_entry(1, "softmax", SOFTMAX_SHAPES, 0.5)])))
    monkeypatch.setattr(paths, "STARTERS_DIR", tmp_path / "no_starters")
    with pytest.raises(PlanError, match="no starter kernel for softmax"):
        kernel_jobs.extract_jobs(broken, 3, tmp_path / "ws")


def test_command_line(plan_path, tmp_path, capsys):
    assert extract.main(["--plan", str(plan_path), "--out", str(tmp_path / "ws"), "--top", "2"]) == 0
    printed = capsys.readouterr().out
    assert "rank 1: matmul" in printed and "--shape M=512,N=5632,K=2048 --dtype float16" in printed
    assert extract.main(["--plan", str(tmp_path / "missing.json"), "--out", str(tmp_path / "ws")]) == 2
    assert "profile.py" in capsys.readouterr().err


class SoftmaxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 24)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


def test_profiled_plan_becomes_jobs_with_the_model_shapes(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = profiler.profile_model(SoftmaxHead(), (torch.randn(3, 5, 16),), warmup=1, iters=1, name="head")
    finally:
        torch.set_num_threads(threads)
    plan = profiler.build_plan(report, hardware.CPU_INTERPRETER)
    _, plan_file = profiler.write_outputs(report, plan, tmp_path)
    jobs = kernel_jobs.extract_jobs(plan_file, 5, tmp_path)
    shapes = {job.kernel_type: job.shape_args for job in jobs}
    assert shapes == {"matmul": ["M=15,N=24,K=16"], "softmax": ["M=15,N=24"]}
    assert {job.model for job in jobs} == {"head"} and {job.dtype for job in jobs} == {"float32"}


def test_the_cuda_backend_starts_from_the_cuda_starters(tmp_path):
    path = tmp_path / "optimization_plan.json"
    path.write_text(json.dumps(_plan([_entry(1, "rmsnorm", NORM_SHAPES, 0.3),
                                      _entry(2, "softmax", SOFTMAX_SHAPES, 0.05)])))
    jobs = kernel_jobs.extract_jobs(path, 5, tmp_path / "ws", backend="cuda")
    assert [job.backend for job in jobs] == ["cuda", "cuda"]
    source = (tmp_path / "ws" / "kernel_1_rmsnorm.py").read_text()
    assert 'BACKEND = "cuda"' in source and "CUDA_SOURCE" in source
    assert kernel_jobs.extract_jobs(path, 5, tmp_path / "ws2", backend="any")[0].backend == "any"
    assert "CUDA_SOURCE" not in (tmp_path / "ws2" / "kernel_1_rmsnorm.py").read_text()     # any: Triton starters


def test_a_type_without_a_cuda_starter_is_a_clear_error(plan_path, tmp_path):
    path = tmp_path / "layernorm_plan.json"
    path.write_text(json.dumps(_plan([_entry(1, "layernorm", NORM_SHAPES, 0.3)])))
    with pytest.raises(PlanError, match=r"no cuda starter kernel for layernorm: .*\(the cuda starters: "
                                                r"matmul, rmsnorm, softmax\); use --backend triton or any"):
        kernel_jobs.extract_jobs(path, 5, tmp_path / "ws", backend="cuda")
    with pytest.raises(ValueError, match="backend must be one of triton, cuda, any"):
        kernel_jobs.extract_jobs(plan_path, 5, tmp_path / "ws", backend="cpp")


def test_a_region_job_is_titled_by_its_ops_a_menu_job_by_its_type(tmp_path):
    """A region's type is a hash (region_3f9a...): its job says what it computes, "gemm+sigmoid+sum"."""
    from autokernel.core.contracts import PlanEntry

    region = PlanEntry.from_json({**_entry(2, "region_3f9a0c1d2e", [{}], 0.4),
                                  "region": {"ops": ["addmm", "sigmoid", "sum"], "kinds": [], "instances": 1,
                                             "sources": []}})
    job = kernel_jobs.make_job(region, "m.py:Model", tmp_path / "k.py")
    # Its ops first, as every line that names it says them; its hash name after, for its files.
    assert job.label == "gemm+sigmoid+sum (2_region_3f9a0c1d2e)"
    assert job.type_label == "gemm+sigmoid+sum (region_3f9a0c1d2e)"
    assert region_title(["mm", "add", "mm", "relu"]) == "gemm+add+relu"
    menu = kernel_jobs.make_job(PlanEntry.from_json(_entry(1, "softmax", SOFTMAX_SHAPES, 0.5)), "m", tmp_path / "s.py")
    assert menu.title == "" and menu.label == "1_softmax" and menu.type_label == "softmax"
