"""What the CUDA starters' tests share: importing a starter without a GPU (its extension replaced by a
PyTorch stand-in that enforces the C++ entry points' input checks), and compiling its CUDA_SOURCE with
the real nvcc where there is one."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.core.paths import ROOT
from autokernel.judge import cuda_build, cuda_launches

NVCC = shutil.which("nvcc") or next((p for p in ["/usr/local/cuda/bin/nvcc"] if Path(p).exists()), None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="needs nvcc (CI has none): compiles CUDA_SOURCE for sm_90a")
GPU_AND_NVCC = NVCC is not None and __import__("torch").cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU_AND_NVCC, reason="needs an NVIDIA GPU and nvcc: the judge runs the "
                                                        "compiled kernels (benchmarks/cuda_check.py backend does on the GPU)")


def starter_path(name: str) -> Path:
    return ROOT / "kernels" / "cuda" / f"{name}.py"


def import_with(name: str, extension, monkeypatch, asked: dict | None = None):
    """The starter module, its load_cuda answering `extension` (checked: the entry points it asks for);
    `asked`, where given, receives what the starter asked load_cuda for."""
    asked = {} if asked is None else asked

    def fake_load_cuda(source, functions, tunables=None, extra_cuda_cflags=None, extra_ldflags=None):
        asked.update(functions=list(functions), tunables=dict(tunables or {}), flags=list(extra_cuda_cflags or []))
        cuda_build.host_declarations(source, functions)      # every entry point is defined in the source
        return extension

    monkeypatch.setattr(cuda_build, "load_cuda", fake_load_cuda)
    spec = importlib.util.spec_from_file_location(f"cuda_starter_{name}", starter_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert all(hasattr(extension, f) for f in asked["functions"]) and asked["tunables"] == module.TUNABLES
    return module


def nvcc_compiles(name: str, tmp_path: Path, tunables: dict | None = None, *, device_only: bool = False) -> None:
    """CUDA_SOURCE, as load_inline writes it, compiles with torch's headers and nvcc flags for sm_90a (as on an
    H100: cuda_build.SM90A_FLAGS, so the code kept for sm_90a compiles too); `tunables` on top of TUNABLES.
    `device_only`: the device pass alone (nvcc -cubin: every kernel the host code launches, built by ptxas), without
    the host pass (cudafe++ and the host compiler, about half the minute a full build takes on two cores), for
    tunables that change only device code once the full build has shown the host part compiles."""
    import sysconfig

    from torch.utils import cpp_extension

    literals = cuda_launches.file_literals(starter_path(name).read_text())
    source = ("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
              + cuda_build.full_source(literals["CUDA_SOURCE"], {**literals["TUNABLES"], **(tunables or {})}))
    (tmp_path / "cuda.cu").write_text(source)
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    # A CPU-only torch wheel ships c10/cuda without its generated macros header; an empty one stands in.
    if not any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in includes):
        stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
        includes.insert(0, str(tmp_path / "stub"))
    flags = [*cpp_extension.COMMON_NVCC_FLAGS, *cuda_build.DEFAULT_CUDA_FLAGS, "-std=c++20", *cuda_build.SM90A_FLAGS]
    proc = subprocess.run([NVCC, *flags, *(f"-I{p}" for p in includes), "-DTORCH_EXTENSION_NAME=check",
                           "-cubin" if device_only else "-c", str(tmp_path / "cuda.cu"), "-o", str(tmp_path / "cuda.o")],
                          capture_output=True, text=True, timeout=900)
    found = cuda_build.first_error(proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{found}\n{proc.stderr[-3000:]}"


def judge_passes(name: str, tmp_path: Path) -> None:
    import json

    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(starter_path(name)),
                           "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["correctness"] == "PASS", f"{result['failed_stage']}: {result['message']}"


def judge_crashes_without_a_gpu(name: str, tmp_path: Path) -> None:
    """On a machine without a GPU the judge reports a CRASH at load that says why, from the worker's exception."""
    import json

    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(starter_path(name)), "--json-out",
                    str(out), "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    assert (result["correctness"], result["failed_stage"]) == ("CRASH", "load")
    assert result["message"].startswith("RuntimeError: a CUDA kernel file needs an NVIDIA GPU"), result["message"]
    assert f"(at {name}.py:" in result["message"]


def search_can_tune(name: str) -> None:
    """The built-in agent reads TUNABLE_CHOICES and rewrites TUNABLES; every choice keeps the file's contract,
    and only the #defines (so the build hash) change."""
    from autokernel.agents.tunables import read_tunables, rewrite_tunables
    from autokernel.search import integrity

    source = starter_path(name).read_text()
    tunables, choices = read_tunables(source)
    for tunable, values in choices.items():
        for value in values:
            changed = rewrite_tunables(source, {**tunables, tunable: value})
            integrity.check_contract(changed, name)
            literals = cuda_launches.file_literals(changed)
            assert literals["CUDA_SOURCE"] == cuda_launches.file_literals(source)["CUDA_SOURCE"]
            written = int(value) if isinstance(value, bool) else value          # a boolean is written 1 or 0
            assert f"#define {tunable} {written}" in cuda_build.defines(literals["TUNABLES"]).splitlines()
