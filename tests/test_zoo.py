"""Tests for benchmarks/suites/zoo.py, the GPU gate: the zoo's tiny configurations end with a verdict on the CPU.

The GPU runs the zoo at full size as the first call of every session (benchmarks/results/*_zoo_gate*); here the
same architectures at the CPU tests' sizes go through `autokernel verify --starters` in Triton's interpreter, one
of each kind that ended with no verdict on the H200 before containment (a Linear + ReLU chain, a ResNet's
convolutions and residual adds, pooling that nothing planned, a selective scan).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from benchmarks.suites import zoo  # noqa: E402

# The GQA LLaMA's crash (a causal mask made from arange) happens on a GPU only; tests/regions covers its cause.
# The longest first, two at a time (zoo.run --jobs 2), so that the two short ones end together: each alone on this
# CPU (2026-11-29, a loaded two-core machine) took 113, 102, 51 and 50 s; in this order the last ends at ~163 s, in
# the former order (the MLP, ResNet-18, max pool, Mamba) at ~203 s, with one run alone for the last 90.
ON_CPU = ["kb: resnet18", "mamba-style scan", "kb: deep narrow mlp", "kb: maxpool"]


def test_every_zoo_entry_has_a_tiny_configuration_and_names_what_it_needs():
    for name, entry in zoo.ZOO.items():
        assert entry.full and entry.tiny, name
        assert entry.needs in (None, "transformers", "torchvision"), name
    assert set(ON_CPU) <= set(zoo.ZOO)


def test_an_entry_with_its_own_dtype_is_verified_in_it_and_the_others_in_the_runs(tmp_path):
    def dtype_of(name):
        cmd = zoo.command(name, "full", "float16", tmp_path)
        return cmd[cmd.index("--dtype") + 1]
    assert dtype_of("hf gpt2 1x512 float32") == "float32" and dtype_of("hf bert 1x512") == "float16"


def test_each_verify_is_asked_to_end_with_a_verdict_inside_its_models_limit(tmp_path):
    # Killed at the limit, a verify leaves no verdict (the gate of session 23: two models at 420 s).
    cmd = zoo.command("hf t5 1x512", "full", "float16", tmp_path, timeout_s=420)
    assert cmd[cmd.index("--time-limit") + 1] == str(420 - zoo.LIMIT_MARGIN_S)
    assert "--time-limit" not in zoo.command("hf t5 1x512", "full", "float16", tmp_path)


def test_a_row_without_a_report_is_counted_and_shown_as_no_verdict():
    rows = [{"name": "crashes", "exit": 2, "seconds": 3.0, "report": None, "tail": ["KeyError: relu_1"]},
            {"name": "needs torchvision", "exit": None, "skipped": "needs torchvision", "seconds": 0, "report": None,
             "tail": []}]
    table = zoo.summarize(rows)
    assert "| crashes | NO VERDICT (exit 2): KeyError: relu_1 |" in table
    assert "0 of 1 models ended with a verdict." in table


def test_the_table_names_its_host_and_the_load_around_the_run():
    line = zoo.host_line(0.25, 31.0)
    assert line.startswith(f"host: {zoo.os.cpu_count()} CPUs (") and line.endswith("load average 0.2 at the start, "
                                                                                  "31.0 at the end")


@pytest.mark.slow
def test_the_tiny_zoo_ends_every_model_with_a_verdict_on_the_cpu(tmp_path):
    code = zoo.run(tmp_path, ON_CPU, jobs=2, size="tiny", dtype="float32", timeout_s=900)
    rows = {row["name"]: row for row in __import__("json").loads((tmp_path / "zoo.json").read_text())}
    missing = {name: zoo.verdict_of(row) for name, row in rows.items() if row["report"] is None}
    assert code == 0 and not missing, missing
    for name, row in rows.items():
        assert row["report"]["verdict"]["summary"].startswith("no speed verdict"), name
        assert row["exit"] in (0, 3, 4, 5), (name, row["exit"])


def test_runs_side_by_side_share_the_cpus_or_compile_in_process(tmp_path, monkeypatch):
    monkeypatch.setattr(zoo.os, "cpu_count", lambda: 16)
    lock = tmp_path / "gpu_timing.lock"
    env = zoo.job_environment({"PATH": "/bin"}, lock, None, 8)
    # 2 CPUs a run is too few for a pool: each compiles in its own process.
    assert env["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and env["PATH"] == "/bin"
    assert zoo.job_environment({}, lock, None, 4)["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
    assert zoo.job_environment({}, lock, None, 1)["TORCHINDUCTOR_COMPILE_THREADS"] == "16"
    assert env["AUTOKERNEL_GPU_TIMING_LOCK"] == str(lock.resolve()) and "CUDA_VISIBLE_DEVICES" not in env
    assert zoo.job_environment({}, lock, 1, 32)["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert zoo.job_environment({}, lock, 1, 32)["CUDA_VISIBLE_DEVICES"] == "1"
    # What the caller set wins.
    own = zoo.job_environment({"TORCHINDUCTOR_COMPILE_THREADS": "4"}, lock, None, 8)
    assert own["TORCHINDUCTOR_COMPILE_THREADS"] == "4"
