"""Tests for orchestrate.py: the keep rule, the state file, the stopping rules, and the whole loop end to end.

The stopping rules run the loop in this process with a fake agent and a fake judge. The end-to-end
test drives `autokernel optimize` in a child process on a temporary copy of the project (its own
git repository, so /work/main's git state is never touched), through the real profiler,
extract.py and bench.py under the Triton interpreter, with the OpenAI and then the Anthropic agent
talking to the scripted fake LLM server.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import orchestrate
from autokernel import gitops, paths, results
from autokernel.agents.base import AgentError, MalformedReply, Proposal
from autokernel.live import ProgressView
from tests.fake_llm_server import FakeLLMServer

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
import os
import time

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
TUNABLES = {{"REPEATS": {repeats}}}
TUNABLE_CHOICES = {{"REPEATS": [1, 16]}}


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


SLOW_STARTER = _kernel("sixteen launches where one would do", repeats=16)
FASTER = _kernel("one launch")
WRONG = _kernel("scaled by 1.5, so wrong", scale="1.5")
SYNTAX_ERROR = FASTER.replace("def kernel_fn(x: torch.Tensor) -> torch.Tensor:", "def kernel_fn(x) -> :")


def _hanging(pid_file: Path) -> str:
    return _kernel("hangs", before=f"open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _subjects(project: Path) -> list[str]:
    return _git(project, "log", "--format=%s").splitlines()


# ---------------------------------------------------------------------- the rules
def test_keep_rule_needs_a_pass_faster_by_more_than_the_noise():
    best = {"correctness": "PASS", "latency_us": 100.0}
    assert orchestrate.is_improvement({"correctness": "PASS", "latency_us": 90.0}, best, noise=0.05)
    assert not orchestrate.is_improvement({"correctness": "PASS", "latency_us": 96.0}, best, noise=0.05)
    assert not orchestrate.is_improvement({"correctness": "FAIL", "latency_us": 10.0}, best, noise=0.05)
    assert not orchestrate.is_improvement({"correctness": "PASS", "latency_us": None}, best, noise=0.05)


def test_noise_is_the_relative_spread_of_two_baselines_with_a_floor():
    assert orchestrate.measured_noise({"latency_us": 100.0}, {"latency_us": 110.0}, floor=0.02) == pytest.approx(0.1)
    assert orchestrate.measured_noise({"latency_us": 100.0}, {"latency_us": 100.5}, floor=0.02) == 0.02
    assert orchestrate.measured_noise({"latency_us": 100.0}, {"latency_us": None}, floor=0.02) == 0.02


def test_state_round_trips_and_bad_state_is_a_clear_error(tmp_path):
    progress = orchestrate.JobProgress(baseline={"latency_us": 80.0}, best={"latency_us": 40.0}, noise=0.03,
                                       experiments=4, history=[{"experiment": 2}])
    state = orchestrate.RunState(tag="t", jobs=[{"rank": 1}], kept_commit="abc", budget_s=60.0, experiment=5,
                                 current=progress)
    path = tmp_path / "state.json"
    state.save(path)
    loaded = orchestrate.RunState.load(path)
    assert loaded == state
    assert loaded.current.gain() == 2.0
    path.write_text("{}")
    with pytest.raises(orchestrate.OptimizationError, match="move it aside"):
        orchestrate.RunState.load(path)
    with pytest.raises(orchestrate.OptimizationError, match="nothing to resume"):
        orchestrate.RunState.load(tmp_path / "absent.json")


def test_signals_inside_a_critical_section_wait_for_its_end():
    guard = orchestrate._InterruptGuard()
    steps = []
    with guard:
        with pytest.raises(KeyboardInterrupt):
            with guard.critical():
                os.kill(os.getpid(), signal.SIGTERM)
                steps.append("committed")
                steps.append("recorded")
        assert steps == ["committed", "recorded"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ---------------------------------------------------------------------- the loop's rules, in process
# These run OptimizationRun in this process on a small git repository, with a fake agent and a fake
# judge that reads the result a candidate should get from the candidate file itself: fast, and
# proof that the loop wrote each proposal to kernel.py before judging it.
def _result(latency: float | None, correctness: str = "PASS", pct_peak: float | None = None) -> dict:
    return {"correctness": correctness, "latency_us": latency, "pct_peak": pct_peak, "speedup_vs_pytorch": 1.0,
            "message": None if correctness == "PASS" else "wrong values"}


def _source(*bench_results: dict) -> str:
    """A candidate whose successive bench runs give these results (the last one repeats)."""
    return f"KERNEL_TYPE = 'softmax'\n# fake-results: {json.dumps(list(bench_results))}\n"


def _fake_run_bench(judged: list[str]):
    def run_bench(kernel_path, *, shapes, dtype, timeout_s, seed=None, extra_args=()):
        source = Path(kernel_path).read_text()
        planned = json.loads(source.split("# fake-results: ", 1)[1].splitlines()[0])
        runs_before = judged.count(source)
        judged.append(source)
        return planned[min(runs_before, len(planned) - 1)]
    return run_bench


class ScriptedAgent:
    """Answers each propose() with the next scripted Proposal, or raises the next scripted exception."""
    name = "scripted"

    def __init__(self, *script):
        self.script = list(script)
        self.contexts = []

    def propose(self, ctx):
        self.contexts.append(ctx)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A one-file git repository that paths.* and the state and manifest files point into."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "kernel.py").write_text("placeholder\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    for name, value in {"ROOT": root, "KERNEL_FILE": root / "kernel.py", "WORKSPACE": root / "workspace",
                        "OPTIMIZED_DIR": root / "optimized_kernels",
                        "MANIFEST_FILE": root / "optimized_kernels" / "manifest.json",
                        "RESULTS_TSV": root / "results.tsv", "PROGRAM_MD": root / "program.md"}.items():
        monkeypatch.setattr(paths, name, value)
    monkeypatch.setattr(orchestrate, "STATE_FILE", root / "workspace" / "state.json")
    judged: list[str] = []
    monkeypatch.setattr(orchestrate.runner, "run_bench", _fake_run_bench(judged))
    return root


def _job(root: Path, rank: int, starter: str) -> dict:
    path = root.parent / f"kernel_{rank}_softmax.py"
    path.write_text(starter)
    return {"rank": rank, "kernel_type": "softmax", "path": str(path), "shapes": [{"M": 4, "N": 64}],
            "dtype": "float32", "share": 0.5, "amdahl_2x": 1.33}


def _run(root: Path, jobs: list[dict], agent, **settings) -> orchestrate.RunState:
    repo = gitops.KernelRepo(root)
    repo.start_branch("rules")
    state = orchestrate.RunState(tag="rules", jobs=jobs, kept_commit=repo.head(), budget_s=3600)
    return orchestrate.OptimizationRun(state, repo=repo, agent=agent, settings=orchestrate.LoopSettings(**settings),
                                       view=ProgressView(interactive=False)).run()


def _statuses(root: Path) -> list[tuple]:
    return [(r["experiment"], r["status"], r["correctness"]) for r in results.read_rows(root / "results.tsv")]


def test_noise_decides_and_target_speedup_moves_on_to_the_next_kernel(sandbox):
    jobs = [_job(sandbox, 1, _source(_result(100.0), _result(120.0))), _job(sandbox, 2, _source(_result(50.0)))]
    within_noise, beyond_noise, double = _source(_result(90.0)), _source(_result(80.0)), _source(_result(40.0))
    agent = ScriptedAgent(Proposal("within noise", within_noise), Proposal("beyond noise", beyond_noise),
                          Proposal("twice as fast\nsecond line", double),
                          Proposal("inside the noise floor", _source(_result(49.5))), orchestrate.SearchExhausted("done"))
    state = _run(sandbox, jobs, agent, max_consecutive_reverts=5, target_speedup=2.0)

    assert state.done and state.job_index == 2 and state.current is None
    assert _statuses(sandbox) == [(1, "baseline", "PASS"), (2, "revert", "PASS"), (3, "keep", "PASS"),
                                  (4, "keep", "PASS"), (5, "baseline", "PASS"), (6, "revert", "PASS")]
    assert _subjects(sandbox)[:5] == ["optimized 2_softmax: 1.00x over its baseline", "baseline 2_softmax: kernel_2_softmax.py",
                                      "optimized 1_softmax: 2.50x over its baseline", "exp 4: twice as fast second line",
                                      "exp 3: beyond noise"]
    manifest = json.loads((sandbox / "optimized_kernels" / "manifest.json").read_text())["kernels"]
    assert manifest["1_softmax"]["stopped_because"] == "2.50x over its baseline"
    assert "nothing left to try" in manifest["2_softmax"]["stopped_because"]
    assert (sandbox / "optimized_kernels" / "1_softmax.py").read_text() == double
    # The agent saw the kept kernel, the history so far and the best versions, best first.
    third = agent.contexts[2]
    assert third.kernel_source == beyond_noise
    assert [h["status"] for h in third.history] == ["revert", "keep"]
    assert [source for source, _ in third.best_versions] == [beyond_noise, Path(jobs[0]["path"]).read_text()]
    assert third.job["baseline"]["latency_us"] == 100.0 and third.last_result["latency_us"] == 80.0


def test_reverts_in_a_row_malformed_replies_and_failing_starters(sandbox):
    jobs = [_job(sandbox, 1, _source(_result(None, "FAIL"))), _job(sandbox, 2, _source(_result(100.0)))]
    agent = ScriptedAgent(MalformedReply("no code", tokens_in=7, tokens_out=3),
                          Proposal("wrong", _source(_result(10.0, "FAIL")), tokens_in=5, tokens_out=5))
    state = _run(sandbox, jobs, agent, max_consecutive_reverts=2)

    assert _statuses(sandbox) == [(1, "baseline", "FAIL"), (2, "baseline", "PASS"), (3, "revert", "FAIL"),
                                  (4, "revert", "FAIL")]
    rows = results.read_rows(sandbox / "results.tsv")
    assert rows[2]["description"] == "malformed reply" and rows[2]["llm_tokens"] == 10
    assert state.done and state.llm_tokens == 20
    assert [entry["file"] for entry in state.finished] == ["2_softmax.py"]
    assert state.finished[0]["stopped_because"] == "2 reverts in a row"
    assert "exp 3" not in " ".join(_subjects(sandbox)) and "exp 4" not in " ".join(_subjects(sandbox))


def test_peak_target_ends_a_kernel(sandbox):
    agent = ScriptedAgent(Proposal("near peak", _source(_result(50.0, pct_peak=93.0))))
    state = _run(sandbox, [_job(sandbox, 1, _source(_result(100.0)))], agent, target_speedup=10)
    assert state.finished[0]["stopped_because"] == "93% of the hardware peak"


def test_agent_error_stops_the_run_with_the_state_saved(sandbox):
    agent = ScriptedAgent(Proposal("faster", _source(_result(50.0))), Proposal("slower", _source(_result(90.0))),
                          AgentError("the API rejected the key"))
    with pytest.raises(AgentError, match="rejected the key"):
        _run(sandbox, [_job(sandbox, 1, _source(_result(100.0)))], agent, target_speedup=10)
    saved = orchestrate.RunState.load()
    assert saved.experiment == 3 and saved.current.experiments == 2 and not saved.done
    assert saved.kept_commit == _git(sandbox, "rev-parse", "HEAD").strip()
    assert _subjects(sandbox)[0] == "exp 2: faster"
    assert (sandbox / "kernel.py").read_text() == _source(_result(50.0))


def test_budget_ends_the_run_after_saving_the_current_kernel(sandbox):
    class SlowAgent(ScriptedAgent):
        def propose(self, ctx):
            time.sleep(1.5)
            return super().propose(ctx)

    jobs = [_job(sandbox, 1, _source(_result(100.0))), _job(sandbox, 2, _source(_result(100.0)))]
    agent = SlowAgent(Proposal("faster", _source(_result(80.0))), Proposal("never asked", _source(_result(1.0))))
    state = _run(sandbox, jobs, agent, budget_s=1.0, target_speedup=10)
    assert not state.done and state.job_index == 1
    assert state.finished[0]["stopped_because"] == orchestrate.BUDGET_SPENT
    assert len(agent.script) == 1
    assert _statuses(sandbox) == [(1, "baseline", "PASS"), (2, "keep", "PASS")]


def test_on_a_gpu_the_quick_judge_screens_and_the_full_judge_decides(sandbox, monkeypatch):
    monkeypatch.setattr(orchestrate.torch.cuda, "is_available", lambda: True)
    sources, judged = [], []
    fake = _fake_run_bench(sources)

    def run_bench(kernel_path, **kwargs):
        judged.append((Path(kernel_path).read_text(), "--quick" in kwargs["extra_args"]))
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(orchestrate.runner, "run_bench", run_bench)
    starter = _source(_result(100.0))
    slower = _source(_result(150.0))
    # Looks faster to the quick judge, then fails the full one (an edge shape it did not try).
    fails_full = _source(_result(50.0), _result(None, "FAIL"))
    faster = _source(_result(60.0), _result(62.0))
    agent = ScriptedAgent(Proposal("slower", slower), Proposal("quick-only", fails_full), Proposal("faster", faster),
                          orchestrate.SearchExhausted("done"))
    state = _run(sandbox, [_job(sandbox, 1, starter)], agent, target_speedup=10)

    assert judged == [
        (starter, False), (starter, False),            # the baseline: full judge, twice for the noise
        (slower, True),                                # screened out: never pays for the full judge
        (fails_full, True), (fails_full, False),       # the full judge's FAIL decides
        (faster, True), (faster, False)]
    assert _statuses(sandbox)[1:] == [(2, "revert", "PASS"), (3, "revert", "FAIL"), (4, "keep", "PASS")]
    assert state.finished[0]["best_latency_us"] == 62.0   # the full judge's timing is the one kept


def test_no_experiment_starts_that_the_budget_left_cannot_pay_for(sandbox, monkeypatch):
    fake = _fake_run_bench([])

    def slow_bench(kernel_path, **kwargs):
        time.sleep(0.4)
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(orchestrate.runner, "run_bench", slow_bench)
    agent = ScriptedAgent(Proposal("never asked", _source(_result(1.0))))
    state = _run(sandbox, [_job(sandbox, 1, _source(_result(100.0)))], agent, budget_s=1.0)
    # Two baseline runs took 0.8 s of the 1 s: another 0.4 s run would overrun, so none starts.
    assert agent.contexts == [] and _statuses(sandbox) == [(1, "baseline", "PASS")]
    assert state.finished[0]["stopped_because"] == orchestrate.BUDGET_SPENT


def test_a_baseline_cut_short_by_the_budget_is_retried_not_skipped(sandbox, monkeypatch):
    def bench_until_the_budget_is_gone(kernel_path, **kwargs):
        time.sleep(1.2)
        return _result(None, "TIMEOUT")

    monkeypatch.setattr(orchestrate.runner, "run_bench", bench_until_the_budget_is_gone)
    state = _run(sandbox, [_job(sandbox, 1, _source(_result(100.0)))], ScriptedAgent(), budget_s=1.0)
    assert not state.done and state.job_index == 0 and state.current is None
    assert _statuses(sandbox) == [(1, "baseline", "TIMEOUT")]


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


def _start_loop(project: Path, model: Path, agent: str, base_url: str, *extra: str) -> subprocess.Popen:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("ANTHROPIC_", "OPENAI_", "TRITON_"))}
    env.update(OPENAI_API_KEY="test-key", ANTHROPIC_API_KEY="test-key", PYTHONPATH=str(project))
    cmd = [sys.executable, "-m", "autokernel.cli", "optimize", str(model), "--tag", "loop", "--top", "1",
           "--agent", agent, "--base-url", base_url, "--llm-model", "fake-model", "--max-reverts", "4",
           "--target-speedup", "100", "--budget", "1h", *extra]
    return subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_file(path: Path, proc: subprocess.Popen, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the loop ended (exit {proc.returncode}) before {path.name} appeared:\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {within_s} s:\n{proc.communicate()[0]}")
        time.sleep(0.1)
    while not path.read_text():
        time.sleep(0.05)


def _process_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def test_loop_keeps_reverts_logs_and_resumes_after_an_interrupt(tmp_path):
    project = copy_project(tmp_path / "project")
    model = tmp_path / "tiny_softmax.py"
    model.write_text(TINY_MODEL)
    first_hang, second_hang = tmp_path / "hang1.pid", tmp_path / "hang2.pid"

    with FakeLLMServer() as server:
        server.add_kernel_reply("one launch instead of sixteen", FASTER)
        server.add_kernel_reply("scale the output", WRONG)
        server.add_kernel_reply("wait for inspiration", _hanging(first_hang))
        # Session one (OpenAI) is interrupted while bench.py runs the hanging kernel.
        loop = _start_loop(project, model, "openai", server.openai_base_url, "--experiment-timeout", "90s")
        _wait_for_file(first_hang, loop, within_s=150)
        loop.send_signal(signal.SIGINT)
        output, _ = loop.communicate(timeout=60)
        assert loop.returncode == 130, output
        hang_pid = int(first_hang.read_text())
        assert hang_pid != loop.pid, "candidate code ran inside the loop process"
        assert _process_gone(hang_pid), "the interrupted bench child survived"
        assert "exp 2 KEEP PASS" in output and "exp 3 REVERT FAIL" in output
        assert "--resume" in output

        state = json.loads((project / "workspace" / "state.json").read_text())
        assert state["experiment"] == 3 and state["current"]["experiments"] == 2 and not state["done"]
        assert state["kept_commit"] == _git(project, "rev-parse", "HEAD").strip()
        assert _subjects(project) == ["exp 2: one launch instead of sixteen", "baseline 1_softmax: kernel_1_softmax.py",
                                      "init"]
        assert (project / "kernel.py").read_text() == FASTER
        assert _git(project, "status", "--porcelain", "--untracked-files=no") == ""

        # Session two (Anthropic) resumes: the hang is retried and killed at the time limit.
        server.add_kernel_reply("wait for inspiration again", _hanging(second_hang))
        server.add_kernel_reply("fewer characters", SYNTAX_ERROR)
        server.add_reply("I would try a larger block size next.")
        loop = _start_loop(project, model, "anthropic", server.anthropic_base_url, "--resume",
                           "--experiment-timeout", "20s")
        output, _ = loop.communicate(timeout=240)
        assert loop.returncode == 0, output
        assert _process_gone(int(second_hang.read_text()))
        paths_asked = [request.path for request in server.requests]
        assert [p.endswith("/chat/completions") for p in paths_asked] == [True] * 3 + [False] * 3
        assert all(p.endswith("/v1/messages") for p in paths_asked[3:])
        assert server.pending == 0

    rows = results.read_rows(project / "results.tsv")
    assert [(r["experiment"], r["status"], r["correctness"]) for r in rows] == [
        (1, "baseline", "PASS"), (2, "keep", "PASS"), (3, "revert", "FAIL"), (4, "revert", "TIMEOUT"),
        (5, "revert", "CRASH"), (6, "revert", "FAIL")]
    assert rows[5]["description"] == "malformed reply"
    assert [r["llm_tokens"] for r in rows] == [0, 150, 150, 150, 150, 150]
    assert all(r["tag"] == "loop" and r["kernel_type"] == "softmax" for r in rows)
    assert rows[1]["latency_us"] < rows[0]["latency_us"] / 2

    exp2 = _git(project, "log", "--format=%H", "--grep=^exp 2:").strip()
    assert _subjects(project) == [_subjects(project)[0], "exp 2: one launch instead of sixteen",
                                  "baseline 1_softmax: kernel_1_softmax.py", "init"]
    assert _subjects(project)[0].startswith("optimized 1_softmax: ")
    assert _git(project, "branch", "--show-current").strip() == "autokernel/loop"
    assert (project / "optimized_kernels" / "1_softmax.py").read_text() == FASTER
    manifest = json.loads((project / "optimized_kernels" / "manifest.json").read_text())["kernels"]["1_softmax"]
    assert manifest["kernel_type"] == "softmax" and manifest["rank"] == 1
    assert manifest["shapes"] == [{"M": 4, "N": 64}] and manifest["dtypes"] == ["float32"]
    assert manifest["source_commit"] == exp2
    assert manifest["speedup_over_baseline"] > 2
    assert "4 reverts in a row" in manifest["stopped_because"]
    final_state = json.loads((project / "workspace" / "state.json").read_text())
    assert final_state["done"] and final_state["experiment"] == 6 and final_state["llm_tokens"] == 750
    assert _git(project, "status", "--porcelain", "--untracked-files=no") == ""
