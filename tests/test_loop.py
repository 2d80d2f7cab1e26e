"""Tests for autokernel/search/loop.py: the keep rule, the stopping rules, the budget, and the order of the writes.

The loop runs in this process on a throwaway repository (tests/loop_helpers.py) with a fake judge and scripted
agents, or the real LLM agents against the fake LLM server; the real judge's end-to-end runs: test_orchestrate.py.
"""

import time
from pathlib import Path

import pytest

from autokernel.agents.base import AgentError, MalformedReply, RetryPolicy, SearchExhausted
from autokernel.agents.openai_agent import OpenAIAgent
from autokernel.core.contracts import RunSettings
from autokernel.core.run_records import RunState
from autokernel.core.live import ProgressView
from autokernel.search import gitops, loop, loop_records, results, run_state
from autokernel.search.budget import Budget
from tests.fake_llm_server import FakeLLMServer
from tests.loop_helpers import (ScriptedAgent, bench_result, fake_run_bench, git, make_job, make_project, proposal,
                                result, source, subjects)


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    return root


def _run(root: Path, jobs: list[dict], agent, **settings) -> RunState:
    repo = gitops.KernelRepo(root)
    repo.start_branch("rules")
    state = RunState(tag="rules", jobs=jobs, kept_commit=repo.head(), settings=RunSettings(**settings))
    budget = Budget(state.settings.budget_s)
    return loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                                budget=budget).run()


def _statuses(root: Path) -> list[tuple]:
    return [(r["experiment"], r["status"], r["correctness"]) for r in results.read_rows(root / "results.tsv")]


# ---------------------------------------------------------------------- the rules, in the loop
def test_noise_decides_and_target_speedup_moves_on_to_the_next_kernel(project):
    jobs = [make_job(project, 1, source(result(100.0), result(120.0))), make_job(project, 2, source(result(50.0)))]
    within_noise, beyond_noise, double = source(result(90.0)), source(result(80.0)), source(result(40.0))
    agent = ScriptedAgent(proposal("within noise", within_noise), proposal("beyond noise", beyond_noise),
                          proposal("twice as fast\nsecond line", double),
                          proposal("inside the noise floor", source(result(49.5))), SearchExhausted("done"))
    state = _run(project, jobs, agent, max_consecutive_reverts=5, target_speedup=2.0)

    assert state.done and state.job_index == 2 and state.current is None
    assert _statuses(project) == [(1, "baseline", "PASS"), (2, "revert", "PASS"), (3, "keep", "PASS"),
                                  (4, "keep", "PASS"), (5, "baseline", "PASS"), (6, "revert", "PASS")]
    # The fake judge's results carry no meaningful timings (as on CPU): saved, and never called faster.
    assert subjects(project)[:5] == ["optimized 2_softmax: correct; speed unknown on CPU",
                                     "baseline 2_softmax: kernel_2_softmax.py",
                                     "optimized 1_softmax: correct; speed unknown on CPU",
                                     "exp 4: twice as fast second line",
                                     "exp 3: beyond noise"]
    assert all("AutoKernel-Run: rules" in body for body in git(project, "log", "-5", "--format=%B%x00").split("\0")
               if body.strip())
    manifest = __import__("json").loads((project / "optimized_kernels" / "manifest.json").read_text())["kernels"]
    assert manifest["1_softmax"]["stopped_because"] == "2.50x over its baseline"
    assert "nothing left to try" in manifest["2_softmax"]["stopped_because"]
    assert (project / "optimized_kernels" / "1_softmax.py").read_text() == double
    third = agent.contexts[2]
    assert third.kernel_source == beyond_noise
    assert [h["status"] for h in third.history] == ["revert", "keep"]
    assert [text for text, _ in third.best_versions] == [beyond_noise, Path(jobs[0].path).read_text()]
    assert third.baseline.latency_us == 100.0 and third.last_result.latency_us == 80.0
    assert "baseline" not in third.job, "the job is the Job's JSON; its measured baseline is a record of its own"


def test_reverts_in_a_row_malformed_replies_and_failing_starters(project):
    jobs = [make_job(project, 1, source(result(None, "FAIL"))), make_job(project, 2, source(result(100.0)))]
    agent = ScriptedAgent(MalformedReply("no code", tokens_in=7, tokens_out=3, tokens_cached=4),
                          proposal("wrong", source(result(10.0, "FAIL")), tokens_in=5, tokens_out=5, cost_usd=0.25,
                                   tokens_reasoning=2),
                          proposal("wrong again", source(result(11.0, "FAIL"))))
    state = _run(project, jobs, agent, max_consecutive_reverts=2)

    # The malformed reply is a row of its own, not a revert: two failing candidates after it end the job.
    assert _statuses(project) == [(1, "baseline", "FAIL"), (2, "baseline", "PASS"), (3, "revert", "FAIL"),
                                  (4, "revert", "FAIL"), (5, "revert", "FAIL")]
    rows = results.read_rows(project / "results.tsv")
    assert rows[2]["description"] == "malformed reply" and rows[2]["llm_tokens"] == 10
    assert (rows[2]["llm_cached_tokens"], rows[3]["llm_reasoning_tokens"]) == (4, 2)
    assert rows[3]["cost_usd"] == 0.25
    assert state.done and state.llm_tokens == 20 and state.cost_usd == 0.25 and state.cost_unknown_calls == 1   # the malformed one had no price
    assert (state.llm_cached_tokens, state.llm_reasoning_tokens) == (4, 2)
    assert [entry["file"] for entry in state.finished] == ["2_softmax.py"]
    assert state.finished[0]["stopped_because"] == "2 reverts in a row"
    assert "exp 3" not in " ".join(subjects(project)) and "exp 4" not in " ".join(subjects(project))


def test_unreadable_replies_have_their_own_limit(project):
    agent = ScriptedAgent(MalformedReply("no code"), proposal("slower", source(result(120.0))),
                          MalformedReply("no code"), MalformedReply("no code again"))
    state = _run(project, [make_job(project, 1, source(result(100.0)))], agent, max_consecutive_reverts=5,
                 max_malformed=2)
    assert [status for _, status, _ in _statuses(project)] == ["baseline", "revert", "revert", "revert", "revert"]
    assert state.finished[0]["stopped_because"] == "2 unreadable replies in a row (each asked again once)"


def test_peak_target_ends_a_kernel(project):
    agent = ScriptedAgent(proposal("near peak", source(result(50.0, pct_peak=93.0))))
    state = _run(project, [make_job(project, 1, source(result(100.0)))], agent, target_speedup=10)
    assert state.finished[0]["stopped_because"] == "93% of the hardware peak"


def test_a_candidate_of_another_type_or_signature_is_not_benched(project, monkeypatch):
    judged = []
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench(judged))
    other_type = source(result(1.0)).replace("KERNEL_TYPE = 'softmax'", "KERNEL_TYPE = 'matmul'")
    computed_type = source(result(1.0)).replace("KERNEL_TYPE = 'softmax'", "KERNEL_TYPE = 'soft' + 'max'")
    other_signature = source(result(1.0)).replace("def kernel_fn(x):", "def kernel_fn(x, scale=2.0):")
    agent = ScriptedAgent(proposal("matmul now", other_type), proposal("computed", computed_type),
                          proposal("extra parameter", other_signature), SearchExhausted("done"))
    _run(project, [make_job(project, 1, source(result(100.0)))], agent, max_consecutive_reverts=4)
    assert [r["correctness"] for r in results.read_rows(project / "results.tsv")] == ["PASS", "FAIL", "FAIL", "FAIL"]
    assert len(judged) == 2, "only the baseline was benched"
    messages = [ctx.last_result.message for ctx in agent.contexts[1:]]
    assert "KERNEL_TYPE must be assigned once, as the literal 'softmax' (this job's type); found 'matmul'" in messages[0]
    assert "found 'soft' + 'max'" in messages[1]
    assert "kernel_fn must take the reference's parameters (x); it takes (x, scale=...)" in messages[2]
    assert subjects(project)[1] == "baseline 1_softmax: kernel_1_softmax.py", "no candidate was committed"


def test_agent_error_stops_the_run_with_the_state_saved(project):
    agent = ScriptedAgent(proposal("faster", source(result(50.0))), proposal("slower", source(result(90.0))),
                          AgentError("the API rejected the key"))
    with pytest.raises(AgentError, match="rejected the key"):
        _run(project, [make_job(project, 1, source(result(100.0)))], agent, target_speedup=10)
    saved = run_state.load()
    assert saved.experiment == 3 and saved.current.experiments == 2 and not saved.done
    assert saved.stopped_because == "AgentError: the API rejected the key"
    assert saved.kept_commit == git(project, "rev-parse", "HEAD").strip()
    assert subjects(project)[0] == "exp 2: faster"
    assert (project / "kernel.py").read_text() == source(result(50.0))


def test_on_a_gpu_the_quick_judge_screens_and_the_full_judge_decides(project, monkeypatch):
    monkeypatch.setattr(loop.torch.cuda, "is_available", lambda: True)
    sources, judged = [], []
    fake = fake_run_bench(sources)

    def run_bench(kernel_path, **kwargs):
        # On a GPU the screen is --screen (quick, the job's dtype only); the full judge has neither flag.
        assert "--quick" not in kwargs["extra_args"]
        judged.append((Path(kernel_path).read_text(), [a for a in kwargs["extra_args"] if a != "--compare-compile"]))
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", run_bench)
    starter = source(result(100.0))
    slower = source(result(150.0))
    # Looks faster to the quick judge, then fails the full one (an edge shape it did not try).
    fails_full = source(result(50.0), result(None, "FAIL"))
    faster = source(result(60.0), result(62.0))
    agent = ScriptedAgent(proposal("slower", slower), proposal("quick-only", fails_full), proposal("faster", faster),
                          SearchExhausted("done"))
    state = _run(project, [make_job(project, 1, starter)], agent, target_speedup=10)

    assert judged == [
        (starter, ["--one-dtype"]), (starter, ["--one-dtype"]),   # the baseline: every shape, its dtype, twice
        (slower, ["--screen"]),                                   # screened out: never pays for the full judge
        (fails_full, ["--screen"]), (fails_full, []),             # the full judge's FAIL decides
        (faster, ["--screen"]), (faster, [])]
    assert _statuses(project)[1:] == [(2, "revert", "PASS"), (3, "revert", "FAIL"), (4, "keep", "PASS")]
    assert state.finished[0]["best_latency_us"] == 62.0   # the full judge's timing is the one kept


# ---------------------------------------------------------------------- the budget binds
def test_the_budget_saves_the_best_so_far_and_keeps_the_job_open(project):
    class SlowAgent(ScriptedAgent):
        def propose(self, ctx):
            time.sleep(1.5)
            return super().propose(ctx)

    jobs = [make_job(project, 1, source(result(100.0))), make_job(project, 2, source(result(100.0)))]
    agent = SlowAgent(proposal("faster", source(result(80.0))), proposal("never asked", source(result(1.0))))
    state = _run(project, jobs, agent, budget_s=3.0, target_speedup=10)
    assert not state.done and state.job_index == 0 and state.current.experiments == 1
    # Spent, or too short for another experiment (the slow agent's 1.5 s each), said as it is.
    assert loop_records.is_run_stop(state.stopped_because) and state.finished == []
    assert len(agent.script) == 1
    assert _statuses(project) == [(1, "baseline", "PASS"), (2, "keep", "PASS")]
    manifest = __import__("json").loads((project / "optimized_kernels" / "manifest.json").read_text())["kernels"]
    assert manifest["1_softmax"]["stopped_because"] == state.stopped_because
    assert subjects(project)[0] == "optimized 1_softmax: correct; speed unknown on CPU (so far)"


def test_no_experiment_starts_that_the_budget_left_cannot_pay_for(project, monkeypatch):
    fake = fake_run_bench([])

    def slow_bench(kernel_path, **kwargs):
        time.sleep(0.6)
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", slow_bench)
    agent = ScriptedAgent(proposal("never asked", source(result(1.0))))
    state = _run(project, [make_job(project, 1, source(result(100.0)))], agent, budget_s=1.6)
    # Two baseline runs took 1.2 s of the 1.6 s: another 0.6 s run would overrun, so none starts.
    assert agent.contexts == [] and _statuses(project) == [(1, "baseline", "PASS")]
    assert state.stopped_because == loop_records.BUDGET_SPENT


def test_time_left_counts_down_from_the_first_baseline(project, monkeypatch):
    seen, fake = [], fake_run_bench([])
    view = ProgressView(interactive=False)

    def bench(kernel_path, **kwargs):
        seen.append(view.status.time_left_s())
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", bench)
    repo = gitops.KernelRepo(project)
    repo.start_branch("rules")
    state = RunState(tag="rules", jobs=[make_job(project, 1, source(result(100.0)))], kept_commit=repo.head(),
                     settings=RunSettings(budget_s=600.0))
    loop.OptimizationRun(state, repo=repo, agent=ScriptedAgent(SearchExhausted("done")), view=view,
                         budget=Budget(600.0)).run()
    assert seen and all(left is not None and 0 < left <= 600.0 for left in seen), seen


def test_a_keep_whose_speedup_vs_pytorch_fell_says_why_in_its_row(project):
    baseline = {**result(100.0), "speedup_vs_pytorch": 1.5, "pytorch_latency_us": 150.0}
    faster = {**result(80.0), "speedup_vs_pytorch": 1.25, "pytorch_latency_us": 100.0}
    agent = ScriptedAgent(proposal("faster", source(faster)), SearchExhausted("done"))
    _run(project, [make_job(project, 1, source(baseline))], agent)
    keep = results.read_rows(project / "results.tsv")[1]
    assert keep["status"] == "keep" and keep["speedup_vs_pytorch"] == 1.25
    assert keep["description"].startswith("faster [kept for its latency, 80.0 us against the best's 100.0 us; its "
                                          "speedup vs PyTorch is lower because PyTorch eager timed 100.0 us")


def test_a_baseline_the_budget_left_cannot_pay_for_is_not_started(project, monkeypatch, capsys):
    # An earlier run here measured this type's baseline: 2 runs in 20 s. With 3 s left, none starts.
    results.append_row(project / "results.tsv", results.make_row(
        experiment=1, tag="earlier", kernel_type="softmax", result=bench_result(100.0),
        description="baseline (noise 2.0%)", status="baseline", wall_seconds=20.0, llm_tokens=0))
    judged = []
    monkeypatch.setattr(loop.runner, "run_bench", lambda *args, **kwargs: judged.append(1) or bench_result(100.0))
    state = _run(project, [make_job(project, 1, source(result(100.0)))], ScriptedAgent(), budget_s=3.0)
    assert judged == [] and state.current is None
    assert state.stopped_because.startswith(loop_records.BUDGET_TOO_SHORT) and state.stopped_because.endswith(
        "left, and a run of 1_softmax's baseline (as measured before) takes about 0m10s")
    assert state.stopped_because in capsys.readouterr().out
    assert [row["tag"] for row in results.read_rows(project / "results.tsv")] == ["earlier"]


def test_a_baseline_whose_second_run_cannot_be_paid_for_stands_on_one(project, monkeypatch, capsys):
    fake = fake_run_bench([])

    def slow_bench(kernel_path, **kwargs):
        time.sleep(1.0)
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", slow_bench)
    started = time.monotonic()
    state = _run(project, [make_job(project, 1, source(result(100.0)))], ScriptedAgent(), budget_s=1.5)
    # The row below shows the one run; the clock only shows the run did not wait past its budget for long.
    assert time.monotonic() - started < 1.5 + 5, "no second run past the budget"
    (row,) = results.read_rows(project / "results.tsv")
    assert row["status"] == "baseline" and row["description"] == "baseline (one run: no time for a second; noise " \
                                                                  "floor 2.0%)"
    assert (state.current.noise, state.stopped_because) == (0.02, loop_records.BUDGET_SPENT)
    assert "1_softmax's baseline stands on one run" in capsys.readouterr().out


@pytest.mark.slow
def test_a_bench_cut_short_by_the_budget_leaves_no_row(project, monkeypatch):
    limits = []

    def bench_until_its_limit(kernel_path, *, timeout_s, **kwargs):
        limits.append(timeout_s)
        time.sleep(timeout_s)
        return bench_result(None, "TIMEOUT")

    monkeypatch.setattr(loop.runner, "run_bench", bench_until_its_limit)
    started = time.monotonic()
    state = _run(project, [make_job(project, 1, source(result(100.0)))], ScriptedAgent(), budget_s=2.0)
    assert time.monotonic() - started < 2.0 + 5      # not the 15-minute ceiling (slack for a loaded machine)
    assert limits and limits[0] <= 2.0, "the first bench's limit is the budget left, not the 15-minute ceiling"
    assert not state.done and state.job_index == 0 and state.current is None and state.experiment == 0
    assert _statuses(project) == [] and state.spent_s["baselines"] >= limits[0], "no TIMEOUT verdict; its time counts"
    assert subjects(project) == ["init"] and git(project, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_cost_cap_stops_the_run_cleanly(project):
    agent = ScriptedAgent(*[proposal(f"try {n}", source(result(100.0 - n)), tokens_in=1000, cost_usd=0.6)
                            for n in range(5)])
    state = _run(project, [make_job(project, 1, source(result(100.0)))], agent, max_cost_usd=1.0)
    assert state.stopped_because == loop_records.COST_REACHED and not state.done
    assert len(_statuses(project)) == 2 and state.cost_usd == pytest.approx(0.6) and len(agent.contexts) == 1, \
        "after one call of $0.60, a second, expected to cost as much, would pass the $1 cap: it is never started"


def _openai_agent(url: str) -> OpenAIAgent:
    return OpenAIAgent("gpt-6.1-sol", base_url=url, api_key="test-key", retry=RetryPolicy(base_delay_s=0.5))


@pytest.mark.slow
@pytest.mark.parametrize("trouble", ["429 with a long Retry-After", "repeated 500s", "refused connection",
                                     "slow reply"])
def test_llm_trouble_ends_the_run_within_its_budget(project, trouble):
    budget_s = 4.0
    with FakeLLMServer() as server:
        url = server.openai_base_url
        if trouble.startswith("429"):
            server.add_error(429, retry_after="3600")
        elif trouble == "repeated 500s":
            for _ in range(20):
                server.add_error(500)
        elif trouble == "refused connection":
            url = "http://127.0.0.1:9/v1"
        else:
            server.add_kernel_reply("late", source(result(1.0)), delay_s=60)
        started = time.monotonic()
        state = _run(project, [make_job(project, 1, source(result(100.0)))], _openai_agent(url), budget_s=budget_s)
        elapsed = time.monotonic() - started
    # The fake judge takes no time, so one bench limit adds nothing here: the budget itself binds.
    # Far below what waiting would take (a 60 s reply, a 3600 s Retry-After); the slack is a loaded machine's.
    assert elapsed < budget_s + 5, f"{trouble}: {elapsed:.1f} s on a {budget_s} s budget"
    assert loop_records.is_run_stop(state.stopped_because) and not state.done and state.current is not None
    assert _statuses(project) == [(1, "baseline", "PASS")], "no bogus row for an experiment never judged"
    assert run_state.load().stopped_because == state.stopped_because
    if trouble.startswith("429"):
        # The budget was not spent: the wait the server asked for did not fit in it, and the reason says so.
        assert state.stopped_because.startswith(loop_records.BUDGET_TOO_SHORT + ": ")
        assert "HTTP 429" in state.stopped_because and "waiting 3600 s to retry would end past the budget (" \
            in state.stopped_because and "s left)" in state.stopped_because


# ---------------------------------------------------------------------- the bar is PyTorch's best
def _timed(latency: float, eager: float, compiled: float | None = None) -> dict:
    """A GPU result at the job's one shape: ours, eager and (in a --compare-compile run) torch.compile."""
    return {**result(latency), "timings_meaningful": True,
            "timings": [{"shape": "M=4,N=64", "latency_us": latency, "pytorch_latency_us": eager,
                         "compile_latency_us": compiled}]}


def test_a_kernel_slower_than_torch_compile_is_no_gain_and_is_saved_for_verify_to_try(project, monkeypatch):
    from autokernel.search import session

    monkeypatch.setattr(loop.torch.cuda, "is_available", lambda: True)
    calls, fake = [], fake_run_bench([])

    def run_bench(kernel_path, **kwargs):
        calls.append("--compare-compile" in kwargs["extra_args"])
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", run_bench)
    # Job 1: 1.25x faster than its starter and than eager, but torch.compile does it in 60 us.
    slow_job = make_job(project, 1, source(_timed(100.0, 150.0, 60.0), _timed(100.0, 150.0)))
    # Job 2: its improvement beats torch.compile's 90 us.
    fast_job = make_job(project, 2, source(_timed(100.0, 150.0, 90.0), _timed(100.0, 150.0)))
    agent = ScriptedAgent(proposal("faster", source(_timed(80.0, 150.0))), SearchExhausted("done"),
                          proposal("faster still", source(_timed(50.0, 150.0))), SearchExhausted("done"))
    state = _run(project, [slow_job, fast_job], agent, target_speedup=10)

    assert calls == [True, False, False, False, True, False, False, False], "compile is timed once per job"
    no_gain, winner = state.finished
    assert no_gain["verdict"] == "no gain" and winner["verdict"] == "winner"
    # Both saved: in the model, Inductor may take another path than for the op alone; verify tells.
    assert all((project / "optimized_kernels" / f"{n}_softmax.py").exists() for n in (1, 2))
    manifest = __import__("json").loads((project / "optimized_kernels" / "manifest.json").read_text())["kernels"]
    assert list(manifest) == ["1_softmax", "2_softmax"] and manifest["2_softmax"]["wins_at"] == ["M=4,N=64"]
    assert manifest["1_softmax"]["verdict"] == "no gain" and manifest["1_softmax"]["wins_at"] == []
    assert winner["best_speedup_vs_pytorch_best"] == pytest.approx(90.0 / 50.0)
    rows = results.read_rows(project / "results.tsv")
    assert [(r["status"], r["speedup_vs_compile"]) for r in rows[:2]] == [("baseline", 0.6), ("keep", 0.75)]
    lines = session.outcome_lines(state)
    assert "1_softmax: no gain alone: PyTorch's best is faster at every shape; saved for verify" in lines[1]
    assert "2_softmax: done" in lines[2] and "1.80x vs PyTorch's best" in lines[2]


def test_a_candidate_gets_at_least_the_time_the_jobs_first_cold_bench_took(project, monkeypatch):
    # The first bench compiles every shape (and torch.compile's reference); later ones find Triton's
    # cache warm. A candidate with new tile sizes compiles everything again: on an H100 two correct
    # candidates were killed at 3x the warm benches' 16 s.
    monkeypatch.setattr(loop.torch.cuda, "is_available", lambda: True)
    now, limits = [1000.0], []
    monkeypatch.setattr(loop.time, "monotonic", lambda: now[0])
    fake = fake_run_bench([])

    def run_bench(kernel_path, **kwargs):
        cold = "--compare-compile" in kwargs["extra_args"]
        limits.append((cold, "--screen" in kwargs["extra_args"], kwargs["timeout_s"]))
        now[0] += 150.0 if cold else 16.0
        return fake(kernel_path, **kwargs)

    monkeypatch.setattr(loop.runner, "run_bench", run_bench)
    starter, candidate = source(result(100.0)), source(result(90.0), result(91.0))
    _run(project, [make_job(project, 1, starter)], ScriptedAgent(proposal("tiles", candidate),
                                                                 SearchExhausted("done")), target_speedup=10)
    first, *later = limits
    assert first[0] and not any(cold for cold, _, _ in later)
    assert all(limit >= 150.0 for _, _, limit in later), limits          # not 3 x 16 s
