"""Tests for profile.py: it shadows the standard library's `profile`, and cProfile and torch.compile still work.

Each check runs in a fresh interpreter whose working directory and sys.path[0] are the project
root, the way a user's script there (or pytest) sees it. torch.compile runs with the aot_eager
backend: the shadowing is about importing, and dynamo imports cProfile whatever the backend,
while inductor's first C++ compile takes about a minute on a 2-core CPU.
"""

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from autokernel.core import paths

STDLIB_PROFILE = Path(sysconfig.get_paths()["stdlib"]) / "profile.py"


def _run(args: list[str], cwd: Path = paths.ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_project_profile_py_really_is_first_on_the_path():
    result = _run(["-c", "import importlib.machinery, sys; print(sys.path[0]); "
                         "print(importlib.machinery.PathFinder.find_spec('profile', sys.path).origin)"])
    assert result.returncode == 0, result.stderr
    first_entry, origin = result.stdout.split("\n")[:2]
    assert first_entry == "" and Path(origin).resolve() == paths.ROOT / "profile.py"


@pytest.mark.slow
def test_cprofile_and_torch_compile_work_from_the_project_root():
    code = textwrap.dedent("""
        import cProfile, io, pstats, sysconfig
        from pathlib import Path
        import profile
        assert Path(profile.__file__) == Path(sysconfig.get_paths()["stdlib"]) / "profile.py", profile.__file__
        assert not hasattr(profile, "build_parser"), "got the project's profile.py"

        def work():
            return sum(i * i for i in range(1000))

        profiler = cProfile.Profile()
        assert profiler.runcall(work) == 332833500
        stats = io.StringIO()
        pstats.Stats(profiler, stream=stats).print_stats()
        assert "work" in stats.getvalue()

        import torch

        def f(x):
            return torch.sin(x) * 2 + 1

        x = torch.linspace(-1, 1, 16)
        compiled = torch.compile(f, backend="aot_eager")
        assert torch.allclose(compiled(x), f(x))
        print("ok")
    """)
    result = _run(["-c", code])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_help_works():
    result = _run(["profile.py", "--help"])
    assert result.returncode == 0, result.stderr
    assert "usage: profile.py" in result.stdout and "--input-shape" in result.stdout


@pytest.mark.slow
def test_profile_command_writes_the_plan(tmp_path):
    model_file = tmp_path / "tiny_model.py"
    model_file.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def get_model():
            return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32))

        def get_inputs():
            return [torch.randn(4, 16)]
    """))
    workspace = tmp_path / "ws"
    result = _run(["profile.py", str(model_file), "--iters", "1", "--warmup", "1", "--out", str(workspace),
                   "--device", "cpu"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "coverage" in result.stdout and "optimization_plan.json" in result.stdout
    plan = json.loads((workspace / "optimization_plan.json").read_text())
    assert {entry["kernel_type"]: entry["shapes"] for entry in plan["entries"]} == {
        "matmul": [{"M": 4, "N": 32, "K": 16}], "layernorm": [{"M": 4, "N": 32}]}
    assert (workspace / "profile_report.json").is_file()


def test_profile_command_reports_a_bad_model():
    result = _run(["profile.py"])
    assert result.returncode == 2
    assert "profile.py:" in result.stderr and "Give exactly one model" in result.stderr
