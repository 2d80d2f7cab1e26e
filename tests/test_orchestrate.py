"""Tests for orchestrate.py, the whole loop end to end, through `autokernel optimize` in child processes.

The runs use a temporary copy of the project (its own git repository, so this checkout's git state
is never touched), the real profiler, extract.py and bench.py under the Triton interpreter in the
sandbox, and the OpenAI and then the Anthropic agent talking to the scripted fake LLM server. The
loop's rules, its budget and the order of its writes are tested in process, in tests/test_loop.py
and tests/test_session.py.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autokernel.judge import runner, source_check
from autokernel.sandbox import process_tree
from autokernel.search import results
from tests.fake_llm_server import FakeLLMServer
from tests.processes import all_gone_within, gone_within, marked

# Every test here starts real judges or the loop in child processes: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1]

TINY_MODEL = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_model():
    return Model()


def get_inputs():
    return (torch.randn(4, 64),)
'''

# One softmax kernel, in the variants the scripted agent proposes. REPEATS launches make the
# baseline slow on purpose, so the one-launch version is faster by far more than timing noise.
KERNEL_TEMPLATE = '''"""Softmax for the loop test: {what}."""
import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
TUNABLES = {{"REPEATS": {repeats}}}
TUNABLE_CHOICES = {{"REPEATS": [1, 8]}}


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0) * {scale}
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    {before}
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2d)
    if y.numel() == 0:
        return y.reshape(x.shape)
    for _ in range(TUNABLES["REPEATS"]):
        _softmax_rows[(x2d.shape[0],)](x2d, y, n_cols, x2d.stride(0), y.stride(0),
                                       BLOCK_N=triton.next_power_of_2(n_cols))
    return y.reshape(x.shape)
'''


def _kernel(what: str, *, repeats: int = 1, scale: str = "1.0", before: str = "pass") -> str:
    return KERNEL_TEMPLATE.format(what=what, repeats=repeats, scale=scale, before=before)


SLOW_STARTER = _kernel("eight launches where one would do", repeats=8)
FASTER = _kernel("one launch")
WRONG = _kernel("scaled by 1.5, so wrong", scale="1.5")
SYNTAX_ERROR = FASTER.replace("def kernel_fn(x: torch.Tensor) -> torch.Tensor:", "def kernel_fn(x) -> :")


def _hanging(marker: str) -> str:
    # The candidate may write only its own folders: it marks that it hangs in its compiler-cache folder. Its imports
    # and open() are what the source check refuses (autokernel/judge/source_check.py): the sessions that judge it
    # run with the check off (SOURCE_CHECK_OFF), as the layers behind it are what they test.
    return _kernel("hangs", before="import os, time; "
                                   f"open(os.path.join(os.path.dirname(os.environ['TRITON_CACHE_DIR']), {marker!r}), "
                                   "'w').write('hanging'); time.sleep(600)")


SOURCE_CHECK_OFF = {source_check.SOURCE_CHECK_ENV: "0"}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _subjects(project: Path) -> list[str]:
    return _git(project, "log", "--format=%s").splitlines()


# ---------------------------------------------------------------------- the whole loop
def copy_project(destination: Path) -> Path:
    """The project's files (tracked, and new ones git does not ignore) in a fresh repository, with the
    softmax starter swapped for SLOW_STARTER."""
    listed = _git(PROJECT, "ls-files", "--cached", "--others", "--exclude-standard", "-z").split("\0")
    for name in filter(None, listed):
        source = PROJECT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            (destination / name).write_bytes(source.read_bytes())
    (destination / "kernels" / "softmax.py").write_text(SLOW_STARTER)
    _git(destination, "init", "-q", "-b", "main")
    _git(destination, "add", "-A")
    _git(destination, "-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-m", "init")
    return destination


def _start_loop(project: Path, model: Path | None, agent: str, base_url: str, caches: Path,
                *extra: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("ANTHROPIC_", "OPENAI_", "TRITON_"))}
    env.update(env_extra or {})
    # A candidate's compiler caches are one of the few places it may write: the hanging kernels mark themselves there.
    env.update(OPENAI_API_KEY="test-key", ANTHROPIC_API_KEY="test-key", PYTHONPATH=str(project),
               XDG_CACHE_HOME=str(caches))
    what = ["--resume"] if model is None else [str(model), "--tag", "loop", "--top", "1"]
    cmd = [sys.executable, "-m", "autokernel.cli", "optimize", *what, "--agent", agent, "--base-url", base_url,
           "--llm-model", "fake-model", *extra]
    return subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_marker(caches: Path, marker: str, proc: subprocess.Popen, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not list(caches.glob(f"autokernel/candidates/*/{marker}")):
        if proc.poll() is not None:
            pytest.fail(f"the loop ended (exit {proc.returncode}) before {marker} appeared:\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{marker} did not appear within {within_s} s:\n{proc.communicate()[0]}")
        time.sleep(0.1)


def _children(pid: int, named: str) -> list[int]:
    """This process's view of pid's children whose command line holds `named`."""
    found = []
    for child in marked(named):
        try:
            if int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(child)
        except (OSError, ValueError):
            continue
    return found


def _on_branch(project: Path, path: str) -> str:
    return _git(project, "show", f"autokernel/loop:{path}")


# Issue 24: what an LLM rewarded for speed would try against what surrounds the judge. Each is a correct, one-launch
# softmax: a PASS, were the judge fooled. Session two of the loop test below proposes them (a test of their own
# profiled and benched a baseline again: one loop start less, issue 37).
ROUND_TWO_ATTACKS = ["daemon_rewrites_verdict", "daemon_writes_after_the_run", "writes_verdict_through_proc_fd",
                     "thread_outlives_kernel_fn"]


def test_loop_keeps_reverts_logs_and_resumes_after_a_hangup_and_a_kill_and_rejects_the_attacks_on_the_judge(
        tmp_path):
    project = copy_project(tmp_path / "project")
    model = tmp_path / "tiny_softmax.py"
    model.write_text(TINY_MODEL)
    caches = tmp_path / "caches"
    caches.mkdir()
    candidate_processes = str(project / "kernel.py")       # on the command line of bench.py, its worker and launcher
    attacks = {name: (PROJECT / "tests" / "attacks" / f"{name}.py").read_text() for name in ROUND_TWO_ATTACKS}
    reverts = 4 + len(attacks)        # session three's fourth revert ends the run

    with FakeLLMServer() as server:
        server.add_kernel_reply("one launch instead of eight", FASTER)
        server.add_kernel_reply("scale the output", WRONG)
        server.add_kernel_reply("wait for inspiration", _hanging("hang1"))
        # Session one (OpenAI) loses its terminal (SIGHUP) while bench.py runs the hanging kernel.
        loop = _start_loop(project, model, "openai", server.openai_base_url, caches, "--max-reverts", str(reverts),
                           "--target-speedup", "100", "--budget", "1h", "--experiment-timeout", "90s",
                           env_extra=SOURCE_CHECK_OFF)
        # The keep of exp 2 runs the user's-process check first (tens of seconds in the interpreter, on two busy cores).
        _wait_for_marker(caches, "hang1", loop, within_s=300)
        assert _children(loop.pid, "autokernel.sandbox.launcher"), "candidate code ran inside the loop process"
        loop.send_signal(signal.SIGHUP)
        output, _ = loop.communicate(timeout=60)
        assert loop.returncode == 128 + signal.SIGHUP, output
        assert all_gone_within(candidate_processes), "the bench child survived the hangup"
        assert "exp 2 KEEP PASS" in output and "exp 3 REVERT FAIL" in output
        assert "interrupted (SIGHUP)" in output and "autokernel optimize --resume" in output
        assert len(server.checks) == 1, "the endpoint was checked once, before profiling"

        state = json.loads((project / "workspace" / "state.json").read_text())
        assert state["experiment"] == 3 and state["current"]["experiments"] == 2 and not state["done"]
        assert state["kept_commit"] == _git(project, "rev-parse", "autokernel/loop").strip()
        assert state["settings"]["max_consecutive_reverts"] == reverts
        assert state["settings"]["base_url"] == server.openai_base_url
        assert _git(project, "branch", "--show-current").strip() == "main", "the user is back on their branch"
        assert _git(project, "log", "--format=%s", "autokernel/loop").splitlines() == [
            "exp 2: one launch instead of eight", "baseline 1_softmax: kernel_1_softmax.py", "init"]
        assert _on_branch(project, "kernel.py") == FASTER
        assert _git(project, "status", "--porcelain", "--untracked-files=no") == ""

        # Session two (Anthropic) resumes with the run's settings. It judges the attacks on what surrounds the judge
        # (the source check, which refuses each before it runs, off: the sandbox behind it is what is tested), then
        # is killed outright during the hang.
        for name, source in attacks.items():
            server.add_kernel_reply(name, source)
        server.add_kernel_reply("wait for inspiration again", _hanging("hang2"))
        loop = _start_loop(project, None, "anthropic", server.anthropic_base_url, caches, env_extra=SOURCE_CHECK_OFF)
        _wait_for_marker(caches, "hang2", loop, within_s=300)
        [launcher] = _children(loop.pid, "autokernel.sandbox.launcher")
        loop.kill()
        output, _ = loop.communicate(timeout=60)
        assert "--agent anthropic overrides the run's openai" in output and f"--max-reverts {reverts}" in output
        assert all_gone_within(candidate_processes) and gone_within(launcher), \
            "the bench child outlived the killed loop"

        # Session three finishes the job: the kill left an unjudged experiment 8, which is judged anew. A reply
        # without code is asked for again once; unreadable twice, it is a row of its own, not a revert.
        server.add_kernel_reply("fewer characters", SYNTAX_ERROR)
        server.add_reply("I would try a larger block size next.")
        server.add_reply("Still no code from me.")
        server.add_kernel_reply("wait once more", _hanging("hang3"))
        server.add_kernel_reply("scale the output again", WRONG)
        loop = _start_loop(project, None, "anthropic", server.anthropic_base_url, caches,
                           "--experiment-timeout", "20s", env_extra=SOURCE_CHECK_OFF)
        output, _ = loop.communicate(timeout=240)
        assert loop.returncode == 0, output
        # Its TIMEOUT row (below) says it ran; a rejected candidate's cache folder goes with its verdict.
        assert all_gone_within(candidate_processes) and not list(caches.glob("autokernel/candidates/*/hang3"))
        paths_asked = [request.path for request in server.requests]
        assert [p.endswith("/chat/completions") for p in paths_asked] == [True] * 3 + [False] * (6 + len(attacks))
        assert "could not be used: no ```python code block" in json.dumps(server.requests[6 + len(attacks)].body)
        assert server.pending == 0

    rows = results.read_rows(project / "results.tsv")
    assert [(r["experiment"], r["status"], r["correctness"]) for r in rows] == [
        (1, "baseline", "PASS"), (2, "keep", "PASS"), (3, "revert", "FAIL"),
        *((4 + i, "revert", "FAIL") for i in range(len(attacks))),
        (8, "revert", "CRASH"), (9, "revert", "FAIL"), (10, "revert", "TIMEOUT"), (11, "revert", "FAIL")]
    assert [r["description"] for r in rows[3:7]] == ROUND_TWO_ATTACKS
    assert rows[8]["description"] == "malformed reply"
    assert [r["llm_tokens"] for r in rows] == [0, 150, 150, *[150] * len(attacks), 150, 300, 150, 150]
    assert all(r["tag"] == "loop" and r["kernel_type"] == "softmax" for r in rows)
    assert all(r["timings_meaningful"] is False for r in rows if r["correctness"] == "PASS")
    assert rows[1]["latency_us"] < rows[0]["latency_us"] / 2

    exp2 = _git(project, "log", "--format=%H", "--grep=^exp 2:", "autokernel/loop").strip()
    branch = _git(project, "log", "--format=%s", "autokernel/loop").splitlines()
    assert branch[1:] == ["exp 2: one launch instead of eight", "baseline 1_softmax: kernel_1_softmax.py", "init"]
    assert branch[0].startswith("optimized 1_softmax: ")
    assert _git(project, "branch", "--show-current").strip() == "main"
    assert _on_branch(project, "optimized_kernels/1_softmax.py") == FASTER
    manifest = json.loads(_on_branch(project, "optimized_kernels/manifest.json"))["kernels"]["1_softmax"]
    assert manifest["kernel_type"] == "softmax" and manifest["rank"] == 1
    assert manifest["shapes"] == [{"M": 4, "N": 64}] and manifest["dtypes"] == ["float32"]
    assert manifest["source_commit"] == exp2
    assert manifest["speedup_over_baseline"] > 2
    assert f"{reverts} reverts in a row" in manifest["stopped_because"]
    final_state = json.loads((project / "workspace" / "state.json").read_text())
    # Thirteen replies were paid for; the two whose sessions were cut off mid-bench have no row.
    assert final_state["done"] and final_state["experiment"] == 11 and final_state["llm_tokens"] == 13 * 150
    assert _git(project, "status", "--porcelain", "--untracked-files=all") == ""
    # Nothing the attacks wrote, or would have written after their runs (their daemons' waits ended sessions ago),
    # survives: no attack is on the branch, and a rejected candidate's cache folder went with its verdict.
    assert not any(source == _on_branch(project, "kernel.py") for source in attacks.values())
    def cache_folder(source: str) -> Path:          # as child_env.cache_folder_of names it, for these caches
        return caches / "autokernel" / "candidates" / hashlib.sha256(source.encode()).hexdigest()[:32]
    assert cache_folder(FASTER).is_dir(), "the kept candidate's folder stays: where this looks is where they are"
    assert not [name for name, source in attacks.items() if cache_folder(source).exists()]
    assert not list(caches.glob("autokernel/candidates/*/daemon_alive"))
    assert "# written after the run" not in (project / "kernel.py").read_text() + (project / "results.tsv").read_text()
    assert not [p for p in process_tree.process_table() if p in process_tree.descendants(os.getpid())
                and runner.JUDGE_MODULE in Path(f"/proc/{p}/cmdline").read_text(errors="ignore")]


def test_an_unreachable_endpoint_fails_in_seconds_before_profiling(tmp_path):
    project = copy_project(tmp_path / "project")
    model = tmp_path / "tiny_softmax.py"
    model.write_text(TINY_MODEL)
    started = time.monotonic()
    loop = _start_loop(project, model, "openai", "http://127.0.0.1:9/v1", tmp_path)
    output, _ = loop.communicate(timeout=60)
    assert loop.returncode == 1, output
    assert time.monotonic() - started < 20
    assert "cannot reach http://127.0.0.1:9/v1" in output and "--base-url" in output
    assert not (project / "workspace" / "optimization_plan.json").exists(), "it profiled first"
    assert "autokernel/loop" not in _git(project, "branch")
