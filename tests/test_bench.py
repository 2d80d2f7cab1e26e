"""The judge rejects what it claims to reject, each at the right stage with a clear message.

Every broken kernel here is the minimal correct softmax in tests/judge_fixtures/row_softmax.py
with one classic bug swapped in, run through the real bench.py in a child process (CPU
interpreter, as in CI).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel.kernel_types import registry

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text()


def run_bench(kernel_source: str, tmp_path: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(kernel_source)
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(kernel), "--json-out", str(out),
                           "--seed", "1234", *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"bench wrote no result\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    return json.loads(out.read_text()), proc


def broken(old: str, new: str, source: str = BASE) -> str:
    assert old in source, f"fixture no longer contains {old!r}"
    return source.replace(old, new)


def wrapped(extra: str) -> str:
    """The base kernel with kernel_fn wrapped by extra code (which sees the original as _correct)."""
    return BASE + "\n\n_correct = kernel_fn\n" + extra


@pytest.mark.slow
def test_base_fixture_passes(tmp_path):
    result, proc = run_bench(BASE, tmp_path)
    assert result["correctness"] == "PASS", result["message"]
    assert proc.returncode == 0
    assert [s["stage"] for s in result["stages"]] == ["smoke", "shape sweep", "stability", "determinism", "edge shapes"]
    assert "RESULT kernel_type=softmax correctness=PASS" in proc.stdout
    assert result["timings_meaningful"] is False and result["latency_us"] > 0
    # Each stage is announced on stderr as it begins: the loop's live view shows it (search/loop.py STAGE_PREFIX).
    from autokernel.search.loop import STAGE_PREFIX
    announced = [line[len(STAGE_PREFIX):] for line in proc.stderr.splitlines() if line.startswith(STAGE_PREFIX)]
    assert announced == ["smoke", "shape sweep", "stability", "determinism", "edge shapes", "timing"]
    # What limits the kernel: under the interpreter there are no GPU figures, and the result says so.
    assert result["limits"]["gpu"] is None and result["limits"]["shapes"] == [] and result["limits"]["occupancy"] == []
    assert "no GPU figures" in result["limits"]["note"] and "what limits this kernel: no GPU figures" in proc.stdout
    # The grid of the last launch is reported under the interpreter too (one program per row), never judged.
    rows = registry.get("softmax").cpu_sweep[-1]["M"]
    assert result["compiled"] == [{"kernel": "_row_softmax", "grid": [rows, 1, 1]}]
    assert result["launch_floor_us"] is None, "the launch floor is measured on a GPU only"


CASES = {
    "padding masked with 0 instead of -inf (wrong only at non-powers of two)": (
        broken('other=-float("inf")).to(tl.float32)  # BUG-SITE: padding', 'other=0.0).to(tl.float32)'),
        "FAIL", "edge shapes", "elements wrong"),
    "no max subtraction (overflows on large logits)": (
        broken("x = x - tl.max(x, axis=0)  # BUG-SITE: max subtraction", "x = x"),
        "FAIL", "stability", "large identical values"),
    # Triton's interpreter can sum both splits to the same bits (it did, at some call counts), where a GPU's order
    # would show: every other call's sum is also a relative 2^-14 off, inside the tolerance and never the same bits.
    "summation order changes between calls": (
        broken("return 0  # BUG-SITE: summation order",
               "_CALLS.append(1)\n    return len(_CALLS) % n_cols",
               broken("denom = tl.sum(num, axis=0)",
                      "denom = (tl.sum(tl.where(cols < shift, num, 0.0), axis=0) + "
                      "tl.sum(tl.where(cols >= shift, num, 0.0), axis=0)) * (1.0 + 0.00006103515625 * (shift % 2))"))
        + "\n_CALLS = []\n",
        "FAIL", "determinism", "differs from call 1"),
    "last row never written": (
        broken("grid = (rows,)  # BUG-SITE: grid", "grid = (max(rows - 1, 1),)"),
        "FAIL", "smoke", "where the reference has"),
    "input overwritten in place": (
        wrapped("def kernel_fn(x):\n    out = _correct(x)\n    x.fill_(0.5)\n    return out\n"),
        "FAIL", "smoke", "modified its input 'x'"),
    # Refused from its source, before it runs (autokernel/judge/source_check.py); the runtime guard behind that is
    # tests/attacks/decoy_launch_returns_torch.py's.
    "returns the PyTorch reference": (
        wrapped("import reference\n\ndef kernel_fn(x):\n    return reference.softmax(x)\n"),
        "FAIL", "load", "imports reference"),
    "caches its result by shape": (
        wrapped("_cache = {}\n\ndef kernel_fn(x):\n    key = (tuple(x.shape), x.dtype)\n"
                "    if key not in _cache:\n        _cache[key] = _correct(x)\n    return _cache[key]\n"),
        "FAIL", "smoke", "returned the same output buffer as on its previous call"),
    "returns an output of the wrong dtype": (
        wrapped("def kernel_fn(x):\n    return _correct(x).float()\n"),
        "FAIL", "smoke", "output dtype"),
    "raises inside kernel_fn": (
        wrapped("def kernel_fn(x):\n    raise RuntimeError('illegal memory access (simulated)')\n"),
        "CRASH", "smoke", "illegal memory access"),
    "syntax error": ("def kernel_fn(x:\n", "CRASH", "load", "SyntaxError"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_judge_rejects_broken_kernel(name, tmp_path):
    source, correctness, stage, message = CASES[name]
    result, proc = run_bench(source, tmp_path)
    assert result["correctness"] == correctness, result["message"]
    assert result["failed_stage"] == stage, result["message"]
    assert message in result["message"]
    assert proc.returncode == {"FAIL": 1, "CRASH": 2}[correctness]
    assert f"RESULT kernel_type=softmax correctness={correctness}" in proc.stdout or stage == "load"


@pytest.mark.slow
def test_the_screen_checks_the_runs_dtype_only_and_the_full_judge_every_dtype(tmp_path):
    # The loop screens candidates with --screen, which skips the other dtypes' compiles; a kernel
    # wrong only in bfloat16 passes that screen, and the full judge (which decides a keep) fails it.
    wrong_in_bf16 = broken("grid = (rows,)  # BUG-SITE: grid",
                           "grid = (rows - (x.dtype == torch.bfloat16 and rows > 1),)")
    screened, _ = run_bench(wrong_in_bf16, tmp_path, "--screen", "--dtype", "float16")
    assert screened["correctness"] == "PASS", screened["message"]
    assert all(s["cases"] <= 3 for s in screened["stages"] if s["stage"] in ("shape sweep", "edge shapes"))
    full, proc = run_bench(wrong_in_bf16, tmp_path, "--dtype", "float16")
    assert full["correctness"] == "FAIL" and "bfloat16" in full["message"], full["message"]
    # A job's baseline (its starter) is --one-dtype: every sweep and edge shape, in the job's dtype alone.
    baseline, _ = run_bench(wrong_in_bf16, tmp_path, "--one-dtype", "--dtype", "float16")
    assert baseline["correctness"] == "PASS", baseline["message"]
    cases = {s["stage"]: s["cases"] for s in baseline["stages"]}
    softmax = registry.get("softmax")
    assert (cases["shape sweep"], cases["edge shapes"]) == (len(softmax.cpu_sweep), len(softmax.cpu_edge_shapes))


@pytest.mark.slow
def test_a_job_of_an_op_returning_a_pair_is_checked_and_timed_tensor_by_tensor(tmp_path):
    # reduce's max_dim (torch.max(x, dim): values and indices) as the job: determinism and the timed
    # calls' checks, whole outputs and samples, go through both tensors; the honest starter passes.
    starter = (ROOT / "kernels" / "reduce.py").read_text()
    result, _ = run_bench(starter, tmp_path, "--quick", "--shape", "O=4,R=64,I=8,op=max_dim")
    assert result["correctness"] == "PASS", result["message"]
    assert [row["shape"] for row in result["timings"]] == ["O=4,R=64,I=8,op=max_dim"]
    assert next(s for s in result["stages"] if s["stage"] == "determinism")["cases"] == 3


@pytest.mark.slow
def test_hang_is_reported_as_timeout(tmp_path):
    source = wrapped("def kernel_fn(x):\n    while True:\n        pass\n")
    # 0.1: the load stage (importing torch and Triton in the worker) keeps room on a loaded machine,
    # where 0.02 (3.6 s) timed out at load instead of smoke.
    result, proc = run_bench(source, tmp_path, "--time-limit-scale", "0.1")
    assert result["correctness"] == "TIMEOUT"
    assert result["failed_stage"] == "smoke"
    assert proc.returncode == 3


def test_missing_kernel_file_is_a_clear_crash(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(tmp_path / "nope.py"),
                           "--json-out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    result = json.loads(out.read_text())
    assert proc.returncode == 2 and result["correctness"] == "CRASH"
    assert "kernel file not found" in result["message"]


@pytest.mark.slow
def test_seed_is_printed_and_reproduces_inputs(tmp_path):
    source = wrapped("import torch\n_seen = []\n\ndef kernel_fn(x):\n"
                     "    print('FIRST', float(x.flatten()[0]), flush=True) if not _seen else None\n"
                     "    _seen.append(1)\n    return _correct(x)\n")
    # --quick: the first call (the smoke case, the same in the screen and the full verdict) is what is compared;
    # the full judge's other stages prove nothing more about the seed, and test_base_fixture_passes runs them.
    first, proc1 = run_bench(source, tmp_path, "--quick")
    second, proc2 = run_bench(source, tmp_path, "--quick")
    assert first["seed"] == 1234
    # What the kernel prints reaches the judge's stderr, marked as the kernel's.
    line = [ln for ln in proc1.stderr.splitlines() if ln.startswith("kernel| FIRST")]
    assert line and line == [ln for ln in proc2.stderr.splitlines() if ln.startswith("kernel| FIRST")]
    assert "seed=1234" in proc1.stdout


def test_a_torch_compile_failure_leaves_the_bar_at_eager_and_is_not_the_kernels_fault():
    # The loop's first baseline run times torch.compile of the reference; if the compiler fails there,
    # the job must not be skipped as if its starter had failed.
    script = (
        "import types, torch\n"
        "from autokernel.judge import timing, timing_stage\n"
        "from autokernel.kernel_types import registry\n"
        "judge = types.SimpleNamespace(kt=registry.get('softmax'), device='cpu', dtype=torch.float32, seed=1,\n"
        "                              next_case=lambda shape, dtype: {'shape': shape, 'dtype': 'float32', 'seed': 1,\n"
        "                                                              'adversarial': None})\n"
        "def broken(**inputs):\n"
        "    raise RuntimeError('inductor could not build this')\n"
        "clock = timing.Clock(torch.device('cpu'))\n"
        "print('compiled', timing_stage.compiled_time(judge, broken, {'M': 4, 'N': 8}, 3, clock, None))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "compiled None" in proc.stdout
    assert "torch.compile of the reference failed at M=4,N=8: RuntimeError: inductor could not build this" in proc.stderr
