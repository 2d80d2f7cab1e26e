"""The project's own dishonest kernels (tests/attacks/) are each rejected by the real judge, at their
stage and with their message, on CPU through the Triton interpreter, in the loop's quick screen
and in the full verdict alike (both go through the same worker and checks).

The GPU-only attacks (side streams, CUDA events, allocator settings) run in
benchmarks/judge.py attacks on a GPU.
"""

import inspect
import json
import os
import re
import runpy
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autokernel.judge import runner, source_check
from autokernel.judge import stages as stages_module
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.sandbox import child_env, landlock, namespaces
from autokernel.sandbox.child_env import caches_for
from tests.processes import all_gone_within

ROOT = Path(__file__).resolve().parents[1]
ATTACK_DIR = ROOT / "tests" / "attacks"
_EXPECTED = runpy.run_path(str(ATTACK_DIR / "expected.py"))
ATTACKS, RUNNER_ATTACKS, BENCH_ARGS, SOURCE_CHECK_ONLY, SOURCE_CHECK = (
    _EXPECTED[name] for name in ("ATTACKS", "RUNNER_ATTACKS", "BENCH_ARGS", "SOURCE_CHECK_ONLY", "SOURCE_CHECK"))
CPU_ATTACKS = [name for name, expected in ATTACKS.items() if expected[3] == "cpu"]
# The runtime guards are judged behind the source check (autokernel/judge/source_check.py), which is off here:
# most attack files load their honest part with runpy, which it refuses by itself. SOURCE_CHECK_ONLY are judged with
# it on.
ATTACK_ENV = {**os.environ, "AUTOKERNEL_REGION_DIRS": str(ATTACK_DIR / _EXPECTED["REGION_DIRS"]),
              source_check.SOURCE_CHECK_ENV: "0"}
# How long the daemon attacks sleep before they act (time.sleep(3) in each file, checked below).
DAEMON_WAIT_S = 3.0
# The loop screens every candidate with --quick; these also go through the full verdict. --quick changes the judge
# from the shape sweep on (fewer shapes, fewer timed calls): an attack caught at load or smoke is judged alike in
# both, so its --quick case stands for the full verdict too (decoy_launch_returns_torch, smoke, was here; issue 37).
FULL_TOO = ["stale_output_when_called_often", "cache_by_data_pointer", "cache_by_address_and_version",
            "computes_before_the_clock_starts", "precomputes_the_next_call"]
CAUGHT_BEFORE_QUICK_DIFFERS = ("load", "smoke")


def _case(name: str, mode: str):
    return (name, mode)


def judge(name: str, tmp_path: Path, *extra: str,
          source_checked: bool = False) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "result.json"
    env = {**ATTACK_ENV, source_check.SOURCE_CHECK_ENV: "1"} if source_checked else ATTACK_ENV
    proc = subprocess.run([sys.executable, str(ROOT / "bench.py"), "--kernel", str(ATTACK_DIR / f"{name}.py"),
                           "--json-out", str(out), "--seed", "1234", *BENCH_ARGS.get(name, []), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert out.exists(), f"bench wrote no result\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    return json.loads(out.read_text()), proc


def test_every_attack_file_has_an_expected_verdict():
    files = {p.stem for p in ATTACK_DIR.glob("*.py") if not p.stem.startswith("_") and p.stem != "expected"}
    # The attacks on the user's process pass bench.py: tests/test_user_process.py runs them through that check.
    # The ways out of the sandbox are honest kernels: tests/test_sandbox_ways_out.py checks what they tried.
    users, ways_out = set(_EXPECTED["USER_PROCESS_ATTACKS"]), set(_EXPECTED["SANDBOX_ATTACKS"])
    assert files == set(ATTACKS) | set(RUNNER_ATTACKS) | users | ways_out
    assert len(files) == len(ATTACKS) + len(RUNNER_ATTACKS) + len(users) + len(ways_out), "each file in one list"
    assert set(SOURCE_CHECK) <= set(ATTACKS) | set(RUNNER_ATTACKS)
    assert set(SOURCE_CHECK_ONLY) <= set(ATTACKS) & set(SOURCE_CHECK), "only the source check sees it: it must"
    for name in SOURCE_CHECK_ONLY:      # judged with the check on: what bench.py answers is the check's refusal
        assert ATTACKS[name][:3] == ("FAIL", "load", SOURCE_CHECK[name])
    for name in FULL_TOO:               # a stage where the full verdict and --quick differ could catch it
        stages = ATTACKS[name][1] if isinstance(ATTACKS[name][1], tuple) else (ATTACKS[name][1],)
        assert set(stages) - set(CAUGHT_BEFORE_QUICK_DIFFERS), name
    assert "quick" not in inspect.getsource(stages_module.stage_smoke), "smoke is the same in both modes"


@pytest.mark.slow
@pytest.mark.parametrize("name, mode", [_case(n, "quick") for n in CPU_ATTACKS] + [_case(n, "full") for n in FULL_TOO])
def test_judge_rejects_attack(name, mode, tmp_path):
    correctness, stages, message, _ = ATTACKS[name]
    # SOURCE_CHECK_ONLY: the runtime guards alone let it pass; the source check refuses it, before it runs.
    result, proc = judge(name, tmp_path, *(["--quick"] if mode == "quick" else []),
                         source_checked=name in SOURCE_CHECK_ONLY)
    assert result["correctness"] == correctness, result["message"]
    assert result["failed_stage"] in (stages if isinstance(stages, tuple) else (stages,)), result["message"]
    assert any(piece in result["message"] for piece in (message if isinstance(message, tuple) else (message,)))
    assert proc.returncode == {"FAIL": 1, "CRASH": 2}[correctness]
    # The judge's RESULT line is the only one: what the kernel printed is marked as the kernel's.
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1 and f"correctness={correctness}" in results[0]
    if name == "forge_result_at_import":
        # The forged result file is replaced by the judge's: its PASS is shown as the kernel's output, nothing more.
        # (Judged here, at load, alike with or without --quick: once, not a second time in a test of its own.)
        assert result["latency_us"] is None
        assert "kernel| RESULT kernel_type=softmax correctness=PASS" in proc.stderr


@pytest.mark.slow
def test_forged_result_file_does_not_fool_the_loop(monkeypatch):
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")       # it opens a file: the layer behind the check
    result = runner.run_bench(ATTACK_DIR / "forge_result_at_import.py", shapes=[], dtype="float16", timeout_s=300,
                              seed=7, extra_args=["--quick"])
    assert result.correctness == "CRASH"
    assert result.speedup_vs_pytorch is None


def test_the_daemon_wait_the_sandbox_test_outlasts_is_the_attacks_own():
    # The longest a daemon attack sleeps before it acts: the test below waits past it, from the bench's start.
    waits = [float(w) for name in RUNNER_ATTACKS
             for w in re.findall(r"time\.sleep\(([\d.]+)\)", (ATTACK_DIR / f"{name}.py").read_text())]
    assert max(waits) == DAEMON_WAIT_S


@pytest.mark.slow
@pytest.mark.parametrize("namespace", ["1", "0"])
@pytest.mark.parametrize("name", sorted(RUNNER_ATTACKS))
def test_a_daemon_that_outlives_the_judge_is_void_and_dies_before_the_verdict_is_read(name, namespace, tmp_path,
                                                                                     monkeypatch):
    # With the PID namespace (where the machine allows one) and with the subreaper's walk alone; the source check,
    # which refuses the daemon's imports, off: this is the sandbox behind it.
    monkeypatch.setenv(namespaces.NAMESPACE_ENV, namespace)
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kernel = tmp_path / f"{name}.py"
    kernel.write_text((ATTACK_DIR / f"{name}.py").read_text())
    correctness, message = RUNNER_ATTACKS[name]
    started = time.monotonic()      # the daemon is forked at the kernel's import, after this
    result = runner.run_bench(kernel, shapes=[], dtype="float16", timeout_s=300, seed=7, extra_args=["--quick"])
    assert result.correctness == correctness and message in result.message, result.message
    assert result.latency_us is None and result.speedup_vs_pytorch is None
    assert all_gone_within(str(kernel), within_s=1.0), "a process of the run outlived it"
    # The CRASH says the daemon existed; its folder, the one place it could write that outlives a bench, is gone
    # with the verdict, and stays gone past the daemon's own wait (DAEMON_WAIT_S after its start, which is after
    # `started`; a second to spare): nothing it wrote, or would write, survives. The bench itself takes most of that
    # wait on two cores, so the test sleeps only what is left of it, not 4 s after the verdict.
    time.sleep(max(0.0, started + DAEMON_WAIT_S + 1.0 - time.monotonic()))
    assert not child_env.cache_folder_of(kernel).exists()


@pytest.mark.slow
@pytest.mark.skipif(landlock.abi() < 1, reason="the worker's own write layer needs Landlock")
def test_the_worker_writes_its_own_folders_and_nothing_of_the_judges(tmp_path, monkeypatch):
    # The judge compiles torch.compile's reference in its own caches, beside the worker's folder: a candidate that
    # planted code there would run in the judge. The worker's second Landlock layer leaves it its own folders alone.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")        # the probe opens files: the layer behind the check
    kernel = tmp_path / "probe.py"
    kernel.write_text(textwrap.dedent("""
        import os
        _cache = os.path.dirname(os.environ["TRITON_CACHE_DIR"])
        _judge = os.path.dirname(os.environ["TMPDIR"])          # the judge's private folder, holding its caches
        _seen = []
        for _label, _folder in (("own tmp", os.environ["TMPDIR"]), ("own cache", _cache), ("judge", _judge),
                                ("judge caches", os.path.join(_judge, "caches", "triton"))):
            try:
                open(os.path.join(_folder, "planted"), "w").write("x")
                _seen.append(_label + " written")
            except OSError:
                _seen.append(_label + " refused")
        open(os.path.join(_cache, "probe"), "w").write("\\n".join(_seen))
    """) + (ATTACK_DIR.parent / "judge_fixtures" / "row_softmax.py").read_text())
    result = runner.run_bench(kernel, shapes=[], dtype="float16", timeout_s=300, seed=7, extra_args=["--quick"])
    assert result.correctness == "PASS", result.message
    seen = (caches_for(kernel) / "probe").read_text().splitlines()
    assert seen == ["own tmp written", "own cache written", "judge refused", "judge caches refused"]


@pytest.mark.slow
@pytest.mark.skipif(landlock.abi() < 6, reason="Landlock signal scoping needs ABI 6")
@pytest.mark.parametrize("confine", ["1", "0"])
def test_the_worker_cannot_signal_the_judge_even_with_the_file_rules_off(confine, tmp_path, monkeypatch):
    # The judge is the worker's parent: a pid the kernel can name, in the namespace too. Stopped while it times
    # PyTorch, or killed, it would judge wrongly or not at all. With the file rules off (red team) the worker had no
    # Landlock layer of its own and shared the judge's domain, so its signals reached it; SIGCONT here is harmless.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(CONFINE_ENV, confine)
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")        # the probe signals: the layer behind the check
    kernel = tmp_path / "probe.py"
    kernel.write_text(textwrap.dedent("""
        import os, signal
        try:
            os.kill(os.getppid(), signal.SIGCONT)
            _seen = "signalled"
        except PermissionError:
            _seen = "refused"
        open(os.path.join(os.path.dirname(os.environ["TRITON_CACHE_DIR"]), "probe"), "w").write(_seen)
    """) + (ATTACK_DIR.parent / "judge_fixtures" / "row_softmax.py").read_text())
    result = runner.run_bench(kernel, shapes=[], dtype="float16", timeout_s=300, seed=7, extra_args=["--quick"])
    assert result.correctness == "PASS", result.message
    assert (caches_for(kernel) / "probe").read_text() == "refused"
