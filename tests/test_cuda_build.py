"""cuda_build: the build cache's key, the cache hit that skips the compiler, and compile errors mapped to
CUDA_SOURCE's lines, reported by the judge's worker as the first line of a CRASH.

The compiler is faked (load_inline replaced) where it would run: CI has neither nvcc nor a GPU.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from autokernel.judge import cuda_build
from autokernel.judge.candidate import worker
from autokernel.judge.candidate.kernel_errors import crash_message

SOURCE = """
#include <torch/types.h>
__global__ void scale_kernel(float* y) { y[threadIdx.x] *= SCALE; }
torch::Tensor scale(torch::Tensor x) {
  scale_kernel<<<1, 32>>>(x.data_ptr<float>());
  return x;
}
"""

# What torch raises when ninja fails: the prefix, then ninja's and nvcc's output (captured from a real build).
NINJA_LOG = """Error building extension 'autokernel_cuda_0123456789abcdef': [1/3] /usr/local/cuda/bin/nvcc \
--generate-dependencies-with-compile --dependency-output cuda.cuda.o.d -DTORCH_EXTENSION_NAME=autokernel_cuda_x \
-O3 -lineinfo -c /cache/autokernel_cuda_x/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /cache/autokernel_cuda_x/cuda.cu -o cuda.cuda.o
/cache/include/c10/core/AutogradState.h(89): warning #3306-D: a default bit-field initializer is a C++20 feature
CUDA_SOURCE(7): error: identifier "undefined_name" is undefined
    y[threadIdx.x] = undefined_name;
                     ^

CUDA_SOURCE(9): error: expected a ";"

2 errors detected in the compilation of "/cache/autokernel_cuda_x/cuda.cu".
[2/3] c++ -MMD -MF main.o.d -c /cache/autokernel_cuda_x/main.cpp -o main.o
ninja: build stopped: subcommand failed.
"""


def key(**changes):
    args = {"source": SOURCE, "functions": ["scale"], "flags": ["-O3"], "torch_version": "2.11.0",
            "capability": "sm_90"}
    return cuda_build.build_key(**{**args, **changes})


def test_the_build_key_is_stable_and_changes_with_every_input():
    assert key() == key()
    variants = [key(source=SOURCE + " "), key(functions=["scale", "other"]), key(flags=["-O2"]),
                key(torch_version="2.12.0"), key(capability="sm_100")]
    assert len({key(), *variants}) == 1 + len(variants)


def test_tunables_are_defines_in_the_hashed_source():
    one = cuda_build.full_source(SOURCE, {"SCALE": 2, "FAST": True})
    assert one.splitlines()[:3] == ["#define FAST 1", "#define SCALE 2", '#line 1 "CUDA_SOURCE"']
    assert cuda_build.full_source(SOURCE, {"SCALE": 3}) != cuda_build.full_source(SOURCE, {"SCALE": 2})
    with pytest.raises(ValueError, match="number or a boolean"):
        cuda_build.defines({"SCALE": "2; system()"})
    with pytest.raises(ValueError, match="identifier"):
        cuda_build.defines({"BAD NAME": 1})


def test_entry_points_are_declared_from_their_definitions():
    assert cuda_build.host_declarations(SOURCE, ["scale"]) == "torch::Tensor scale(torch::Tensor x);"
    with pytest.raises(ValueError, match="defines no host function missing"):
        cuda_build.host_declarations(SOURCE, ["missing"])


@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    """load_inline replaced by a fake that 'builds' (writes the .so) or fails with NINJA_LOG; counts calls."""
    from torch.utils import cpp_extension

    monkeypatch.setenv(cuda_build.CACHE_ENV, str(tmp_path / "cache"))
    calls = []

    def load_inline(name, build_directory, **kwargs):
        calls.append(kwargs)
        if fake_compiler.fail:
            raise RuntimeError(NINJA_LOG)
        (Path(build_directory) / f"{name}.so").write_bytes(b"")
        return f"module {name}"

    fake_compiler.fail = False
    fake_compiler.calls = calls
    monkeypatch.setattr(cpp_extension, "load_inline", load_inline)
    monkeypatch.setattr(cuda_build, "_import_built", lambda name, build_dir: f"cached {name}")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)        # as on the GPU machine
    monkeypatch.setattr(cuda_build, "device_capability", lambda: "sm_90")
    return fake_compiler


def test_without_a_gpu_the_error_says_so(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs an NVIDIA GPU"):
        cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})


def test_a_second_load_of_the_same_build_does_not_compile(fake_compiler):
    first = cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    assert first.startswith("module autokernel_cuda_") and len(fake_compiler.calls) == 1
    call = fake_compiler.calls[0]
    assert call["functions"] == ["scale"] and "#define SCALE 2" in call["cuda_sources"]
    again = cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    assert again == first.replace("module", "cached") and len(fake_compiler.calls) == 1
    cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 4})          # another tunable value: another build
    assert len(fake_compiler.calls) == 2


def test_a_build_without_its_marker_is_built_again(fake_compiler):
    cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    for marker in cuda_build.cache_root().glob(f"*/{cuda_build.BUILT_MARKER}"):
        marker.unlink()             # a build that died half-way, or a folder a candidate planted
    cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    assert len(fake_compiler.calls) == 2


def test_a_compile_error_names_the_first_error_and_its_line_in_cuda_source(fake_compiler):
    fake_compiler.fail = True
    with pytest.raises(cuda_build.CudaCompileError) as raised:
        cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    first_line, *rest = str(raised.value).splitlines()
    assert first_line == 'CUDA compile error at CUDA_SOURCE line 7: identifier "undefined_name" is undefined'
    assert "ninja: build stopped" in "\n".join(rest)      # the whole log follows


def test_the_judge_reports_a_compile_error_as_a_crash_with_that_line(fake_compiler, tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text('from autokernel.judge.cuda_build import load_cuda\nKERNEL_TYPE = "softmax"\n'
                      f'_ext = load_cuda({SOURCE!r}, ["scale"], {{"SCALE": 2}})\n'
                      "def kernel_fn(x):\n    return _ext.scale(x)\n")
    fake_compiler.fail = True
    with pytest.raises(cuda_build.CudaCompileError) as raised:
        worker.load_kernel(kernel)
    message = crash_message(raised.value, kernel)
    assert message.startswith('CudaCompileError: CUDA compile error at CUDA_SOURCE line 7: identifier '
                              '"undefined_name" is undefined (at kernel.py:3: _ext = load_cuda(')


@pytest.mark.parametrize(("capability", "cuda", "flagged"), [((9, 0), "13.0", True), ((9, 0), "12.4", True),
                                                            ((8, 0), "13.0", False), ((10, 0), "13.0", False),
                                                            ((9, 0), "11.8", False)])
def test_sm90a_is_asked_for_on_an_sm90_gpu_only(monkeypatch, capability, cuda, flagged):
    import torch

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.get_device_capability", lambda *device: capability)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    assert cuda_build.sm90a_flags() == (list(cuda_build.SM90A_FLAGS) if flagged else [])
    # The -gencode replaces torch's own arch flags (its cpp_extension adds none once one is given).
    from torch.utils import cpp_extension
    assert cpp_extension._get_cuda_arch_flags(list(cuda_build.SM90A_FLAGS)) == []


def test_without_a_gpu_no_sm90a_flags(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert cuda_build.sm90a_flags() == []


def test_the_sm90a_flags_make_another_build(fake_compiler):
    cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2})
    cuda_build.load_cuda(SOURCE, ["scale"], {"SCALE": 2}, extra_cuda_cflags=list(cuda_build.SM90A_FLAGS))
    assert len(fake_compiler.calls) == 2
    assert fake_compiler.calls[1]["extra_cuda_cflags"][-2:] == list(cuda_build.SM90A_FLAGS)


def test_errors_outside_cuda_source_and_logs_without_one():
    text, line = cuda_build.first_error("main.cpp:3:10: error: 'scale' was not declared\n")
    assert (text, line) == ("'scale' was not declared", None)
    assert str(cuda_build.compile_error("ninja: build stopped\n", "x")).startswith(
        "CUDA build of x failed (no compiler error in its log)")


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="needs nvcc (CI has none): checks the #line mapping against the real compiler")
def test_real_nvcc_reports_lines_of_cuda_source(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = "\n__global__ void k(float* y) {\n  y[threadIdx.x] = undefined_name;\n}\n"
    path = tmp_path / "cuda.cu"
    path.write_text("#include <cuda_runtime.h>\n" + cuda_build.full_source(source, {"A": 1}))
    proc = subprocess.run([nvcc, "-c", str(path), "-o", str(tmp_path / "k.o")], capture_output=True, text=True)
    assert proc.returncode != 0
    assert cuda_build.first_error(proc.stdout + proc.stderr) == ('identifier "undefined_name" is undefined', 3)


def test_a_sandboxed_child_builds_in_a_cache_of_its_own_that_is_gone_after(tmp_path):
    import sys

    from autokernel.core.paths import ROOT
    from autokernel.judge import runner

    probe = ("import os\nfrom autokernel.judge import cuda_build\n"
             "folder = cuda_build.cache_root() / 'autokernel_cuda_probe'\n"
             "folder.mkdir(parents=True, exist_ok=True)\n"
             "(folder / 'written').write_text('x')\n"
             "print(folder)\n")
    result = runner.run_child([sys.executable, "-c", probe], timeout_s=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    folder = Path(result.stdout.strip())
    assert folder.name == "autokernel_cuda_probe" and not folder.exists()    # removed with the child's own folder
    assert not (cuda_build.cache_root() / "autokernel_cuda_probe").exists()