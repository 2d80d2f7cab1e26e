"""The judge's first line (autokernel/judge/source_check.py): what a kernel file may do, read from its source before
any of it runs. Every shipped starter and every region starter must pass it; each attack's trick must be named."""

import io
import json
import os
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from autokernel.judge import source_check  # noqa: E402
from autokernel.judge.candidate import worker_process  # noqa: E402
from autokernel.judge.judge_link import CandidateWorker, WorkerFailure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ATTACK_DIR = ROOT / "tests" / "attacks"
SOURCE_CHECK = runpy.run_path(str(ATTACK_DIR / "expected.py"))["SOURCE_CHECK"]
STARTERS = sorted([*ROOT.glob("kernels/*.py"), *ROOT.glob("kernels/cuda/*.py"), ROOT / "kernel.py",
                   *ROOT.glob("tests/judge_fixtures/*.py")])
HONEST = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text()


@pytest.mark.parametrize("path", STARTERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_starter_passes(path):
    assert source_check.problems(path.read_text(), path.name) == []


@pytest.mark.slow
@pytest.mark.parametrize("example", ["gemm_sigmoid_rowsum", "cumsum"])
def test_a_generated_region_starter_passes(example, tmp_path):
    from tests.regions import starters       # Inductor, on the CPU: seconds per region

    _, path = starters.made(example, str(tmp_path))
    text = path.read_text()
    assert "os.environ.get(\"TRITON_INTERPRET\")" in text, "the one use of os a starter makes is the one allowed"
    assert source_check.problems(text, path.name) == []


@pytest.mark.parametrize("name", sorted(SOURCE_CHECK))
def test_each_attacks_trick_is_named(name):
    found = source_check.problems((ATTACK_DIR / f"{name}.py").read_text(), f"{name}.py")
    assert any(SOURCE_CHECK[name] in problem for problem in found), found


KERNEL = "import torch\nimport triton\nimport triton.language as tl\n\nKERNEL_TYPE = 'softmax'\n\n"

REFUSED = {
    "import threading": "imports threading",
    "import numpy as np": "imports numpy",
    "import torch.nn.functional as F": "imports torch.nn.functional",
    "from torch.utils._python_dispatch import _disable_current_modes": "imports _disable_current_modes",
    "from . import helper": "a relative import",
    "import os\nKEY = os.environ['OPENAI_API_KEY']": "uses os",
    "X = __import__('socket')": "uses __import__",
    "exec('import os')": "uses exec",
    "TEXT = open('/etc/shadow').read()": "uses open",
    "G = globals()": "uses globals",
    "B = __builtins__": "uses __builtins__",
    "C = torch.__class__": "reads the attribute __class__",
    "M = torch._C": "reads the private attribute _C",
    "O = torch.os": "reaches the module os",
    "F = getattr(torch, 'mat' + 'mul')": "uses getattr",
    "F = getattr(torch, '_C')": "reads the private attribute _C",
    "torch.matmul = lambda a, b: a": "assigns torch.matmul",
    "def kernel_fn(x):\n    return torch.softmax(x, -1)": "uses torch.softmax",
    "def kernel_fn(x):\n    return x.sum(-1)": "uses x.sum",
    "def kernel_fn(a, b):\n    return a @ b": "multiplies matrices with @",
    "def kernel_fn(x):\n    return torch.nn.functional.softmax(x, -1)": "uses torch.nn",
    "def kernel_fn(x):\n    return torch.ops.aten._softmax(x, -1, False)": "uses torch.ops",
    "def kernel_fn(x):\n    return x.numpy()": "reaches the module numpy through x",
    "def kernel_fn(x):\n    return KEYS.setdefault((x.data_ptr(), x._version), x)":
        "reads the private attribute _version",
    "def kernel_fn(x):\n    g = (i for i in [0])\n    return g.gi_frame.f_back.f_globals":
        "reads the attribute gi_frame",
    "KEY = '{0._version}'.format(torch.ones(1))": "a format string that reads a private attribute",
    "class T(torch.Tensor):\n    def __torch_function__(cls, *a):\n        return 0": "defines __torch_function__",
    "class T:\n    def __del__(self):\n        pass": "defines __del__",
    "SRC = '#include <torch/types.h>\\nint f() { return system(\"id\"); }'": "CUDA C++ source that calls system(",
    "SRC = '#include <torch/types.h>\\n#define RUN sys##tem\\nint f() { return RUN(\"id\"); }'": "calls ##",
    "SRC = '#include <cstdlib>\\nextern \"C\" int go(const char*) asm(\"system\");'": "CUDA C++ source that calls asm(",
    "import typing\nHINTS = typing.get_type_hints(kernel_fn)": "reads the attribute get_type_hints",
}

ACCEPTED = [
    "from __future__ import annotations\nimport math\nimport functools\nfrom dataclasses import dataclass",
    "from typing import NamedTuple\nimport itertools\nfrom collections import namedtuple",
    "def configs(sizes):\n    seen = set()\n    for size in sorted(sizes):\n        seen.add(size)\n"
    "    chosen = list(seen)\n    chosen.sort()\n    return chosen",
    "from triton.tools.tensor_descriptor import TensorDescriptor\nfrom torch._subclasses.fake_tensor import is_fake",
    "import os\nif os.environ.get('TRITON_INTERPRET') == '1':\n"
    "    from autokernel.core.interpreter_libdevice import libdevice",
    "DT = getattr(torch, 'float16')\nTF32 = torch.backends.cuda.matmul.allow_tf32",
    "class Cache(dict):\n    __slots__ = ()\n    def __init__(self):\n        super().__init__()\n"
    "    def get(self, key):\n        return self._plans.get(key)",
    "@triton.jit\ndef k(x_ptr, N: tl.constexpr):\n    x = tl.load(x_ptr + tl.arange(0, N))\n"
    "    tl.store(x_ptr, tl.sum(x @ x, axis=0))",
    "def kernel_fn(x):\n    y = torch.empty_like(x)\n"
    "    z = x.reshape(-1, x.shape[-1]).contiguous().to(torch.float32)\n"
    "    w = torch.zeros((4, 4), device=x.device, dtype=torch.float16).view(-1)\n"
    "    print(f'{x.shape[0]:.3f} {math.sqrt(2.0)}', triton.cdiv(4, 2), torch.cuda.is_available())\n    return y",
]


@pytest.mark.parametrize("snippet", sorted(REFUSED))
def test_what_a_kernel_may_not_do_is_refused_and_named(snippet):
    found = source_check.problems(KERNEL + snippet)
    assert any(REFUSED[snippet] in problem for problem in found), found
    with pytest.raises(source_check.SourceRejected, match="does what a kernel file may not"):
        source_check.check(KERNEL + snippet)


@pytest.mark.parametrize("snippet", ACCEPTED)
def test_what_kernels_do_honestly_passes(snippet):
    assert source_check.problems(KERNEL + "import math\n" + snippet) == []


def test_a_refused_kernel_never_runs_and_fails_at_load(tmp_path):
    marker = tmp_path / "ran"
    kernel = tmp_path / "kernel.py"
    # Its import would leave a marker: the judge refuses it before any worker imports it.
    kernel.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n" + HONEST)
    out = tmp_path / "result.json"
    env = {**os.environ, source_check.SOURCE_CHECK_ENV: "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(kernel), "--quick", "--json-out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    result = json.loads(out.read_text())
    assert (result["correctness"], result["failed_stage"], proc.returncode) == ("FAIL", "load", 1), proc.stderr
    assert "line 1: imports pathlib" in result["message"] and "line 2: uses open" not in result["message"]
    assert not marker.exists() and "kernel| " not in proc.stderr


def test_the_worker_imports_only_the_source_the_judge_checked(tmp_path, monkeypatch):
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "1")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(HONEST)
    assert worker_process.check_source(kernel) is None
    kernel.write_text(HONEST + "\nimport threading\n")        # changed after the check, before the worker's import
    worker = CandidateWorker(kernel, sink=io.StringIO())
    try:
        with pytest.raises(WorkerFailure, match="changed after the judge read its source"):
            worker.hello()
    finally:
        worker.close()


def test_the_check_is_off_only_where_its_variable_says_so(tmp_path, monkeypatch):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(textwrap.dedent("import threading\n") + HONEST)
    monkeypatch.delenv(source_check.SOURCE_CHECK_ENV, raising=False)
    assert "imports threading" in worker_process.check_source(kernel)
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")
    assert worker_process.check_source(kernel) is None
