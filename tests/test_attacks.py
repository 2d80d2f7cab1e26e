"""The project's own dishonest kernels (tests/attacks/) are each rejected by the real judge, at their
stage and with their message, on CPU through the Triton interpreter, in the loop's quick screen
and in the full verdict alike (both go through the same worker and checks).

The GPU-only attacks (side streams, CUDA events, allocator settings) run in
benchmarks/judge_attacks.py on a GPU.
"""

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel import runner

ROOT = Path(__file__).resolve().parents[1]
ATTACK_DIR = ROOT / "tests" / "attacks"
ATTACKS, BENCH_ARGS = (runpy.run_path(str(ATTACK_DIR / "expected.py"))[name] for name in ("ATTACKS", "BENCH_ARGS"))
CPU_ATTACKS = [name for name, expected in ATTACKS.items() if expected[3] == "cpu"]
# The loop screens every candidate with --quick; these also go through the full verdict.
FULL_TOO = ["stale_output_when_called_often", "decoy_launch_returns_torch", "cache_by_data_pointer"]


def judge(name: str, tmp_path: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(ATTACK_DIR / f"{name}.py"),
                           "--json-out", str(out), "--seed", "1234", *BENCH_ARGS.get(name, []), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.exists(), f"bench wrote no result\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    return json.loads(out.read_text()), proc


def test_every_attack_file_has_an_expected_verdict():
    files = {p.stem for p in ATTACK_DIR.glob("*.py") if not p.stem.startswith("_") and p.stem != "expected"}
    assert files == set(ATTACKS)


@pytest.mark.parametrize("name, mode", [(n, "quick") for n in CPU_ATTACKS] + [(n, "full") for n in FULL_TOO])
def test_judge_rejects_attack(name, mode, tmp_path):
    correctness, stages, message, _ = ATTACKS[name]
    result, proc = judge(name, tmp_path, *(["--quick"] if mode == "quick" else []))
    assert result["correctness"] == correctness, result["message"]
    assert result["failed_stage"] in (stages if isinstance(stages, tuple) else (stages,)), result["message"]
    assert message in result["message"]
    assert proc.returncode == {"FAIL": 1, "CRASH": 2}[correctness]
    # The judge's RESULT line is the only one: what the kernel printed is marked as the kernel's.
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1 and f"correctness={correctness}" in results[0]


def test_forged_result_file_is_replaced_by_the_judges(tmp_path):
    result, proc = judge("forge_result_at_import", tmp_path)
    assert result["correctness"] == "CRASH" and result["latency_us"] is None
    assert "kernel| RESULT kernel_type=softmax correctness=PASS" in proc.stderr


def test_forged_result_file_does_not_fool_the_loop():
    result = runner.run_bench(ATTACK_DIR / "forge_result_at_import.py", shapes=[], dtype="float16", timeout_s=300,
                              seed=7, extra_args=["--quick"])
    assert result["correctness"] == "CRASH"
    assert result["speedup_vs_pytorch"] is None
