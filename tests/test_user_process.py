"""The user's-process check (autokernel/judge/user_process.py, started by autokernel/judge/user_check.py): a kernel
about to be kept runs where a user's model will run it, many times, and is rejected for what only shows there.

The fast tests drive the checker's calls in this process with PyTorch-only kernel functions (no judge's guards
run here, so they may); the slow ones start the real check, in the sandbox, on the attack kernels of
tests/attacks (USER_PROCESS_ATTACKS), on the starters, and through the loop.
"""

import json
import runpy
import threading
import time
from pathlib import Path

import pytest
import torch

from autokernel.agents.base import SearchExhausted
from autokernel.core import paths
from autokernel.core.contracts import RunSettings
from autokernel.core.live import ProgressView
from autokernel.core.run_records import RunState
from autokernel.judge import runner, user_check, user_process
from autokernel.judge.user_process import Checker, UserProcessFailure
from autokernel.kernel_types import registry
from autokernel.search import gitops, loop, results
from autokernel.search.budget import Budget
from autokernel.search.loop_records import BUDGET_SPENT, BUDGET_TOO_SHORT
from tests.loop_helpers import (ScriptedAgent, bench_result, fake_run_bench, make_job, make_project, proposal, result,
                                source)

ROOT = Path(__file__).resolve().parents[1]
ATTACK_DIR = ROOT / "tests" / "attacks"
_EXPECTED = runpy.run_path(str(ATTACK_DIR / "expected.py"))
REJECTED = {**_EXPECTED["USER_PROCESS_ATTACKS"], **_EXPECTED["ALSO_REJECTED_IN_THE_USERS_PROCESS"]}
SOFTMAX = registry.get("softmax")
SMALL = {"M": 2, "N": 16}


def _softmax(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def _calls(kernel_fn, count: int = 6) -> Checker:
    checker = Checker(SOFTMAX, torch.float16, "cpu", seed=5)
    for _ in range(count):
        checker.call(kernel_fn, SMALL, None, "test")
    checker.compare_held(checker.held, "at the end")
    return checker


# ---------------------------------------------------------------------- the checks, in this process
def test_an_honest_kernel_passes_every_check():
    assert _calls(_softmax, 20).calls == 20


def test_output_buffers_used_again_share_memory_with_an_output_the_caller_holds():
    ring = [torch.empty(SMALL["M"], SMALL["N"], dtype=torch.float16) for _ in range(2)]

    def ping_pong(x):
        out = ring[ping_pong.calls % 2]
        ping_pong.calls += 1
        return out.copy_(_softmax(x))
    ping_pong.calls = 0
    with pytest.raises(UserProcessFailure, match=r"call 3 .*output 0 shares memory with output 0 of call 1"):
        _calls(ping_pong)


def test_an_output_that_is_a_view_of_the_input_shares_its_memory():
    def in_place(x):
        return x.copy_(_softmax(x))
    # The input changed (it is the output): either way the kernel is wrong for a user.
    with pytest.raises(UserProcessFailure, match="changed its input 'x'|shares memory with the input 'x'"):
        _calls(in_place)


def test_a_write_into_an_input_of_two_calls_earlier_is_seen_after_the_call():
    held = []

    def writes_back(x):
        if len(held) >= 2:
            held[-2].copy_(_softmax(x))
        held.append(x)
        return _softmax(x)
    with pytest.raises(UserProcessFailure, match=r"after call 3 .*the input 'x' of call 1 .*changed"):
        _calls(writes_back)


def test_replacing_torch_equal_or_leaving_a_thread_is_a_failure(monkeypatch):
    def patches(x):
        monkeypatch.setattr(torch, "equal", lambda a, b: True)
        return _softmax(x)
    with pytest.raises(UserProcessFailure, match=r"call 1 .*changed torch.equal"):
        _calls(patches)
    monkeypatch.undo()
    stop = threading.Event()

    def starts_a_thread(x):
        threading.Thread(target=stop.wait, daemon=True).start()
        return _softmax(x)
    try:
        with pytest.raises(UserProcessFailure, match="left a thread running"):
            _calls(starts_a_thread)
    finally:
        stop.set()


def test_a_wrong_output_names_the_call():
    def wrong_on_the_fourth(x):
        wrong_on_the_fourth.calls += 1
        return _softmax(x * 2) if wrong_on_the_fourth.calls == 4 else _softmax(x)
    wrong_on_the_fourth.calls = 0
    with pytest.raises(UserProcessFailure, match=r"call 4 \(test, M=2,N=16\): wrong output"):
        _calls(wrong_on_the_fourth)


def test_the_plan_goes_past_the_jobs_largest_row_count_and_calls_many_times():
    assert user_process.past_largest(SOFTMAX, SMALL, [{"M": 64, "N": 256}]) == {"M": 8193, "N": 16}
    assert user_process.past_largest(SOFTMAX, SMALL, [{"M": 16384, "N": 8}])["M"] == 16385
    reduce, attention = registry.get("reduce"), registry.get("flash_attention")
    assert user_process.past_largest(reduce, {"O": 1, "R": 64, "I": 1, "op": "sum"}, [])["O"] == 8193
    assert user_process.past_largest(attention, attention.smoke_shape, [])["B"] == 8193
    plan = user_process.call_plan(SOFTMAX, [{"M": 64, "N": 256}], "cpu")
    many = [entry for entry in plan if entry[2] == "many calls"]
    assert many == [(min(SOFTMAX.cpu_sweep, key=lambda s: s["M"] * s["N"]), None, "many calls", 600)]
    around = plan[:plan.index(many[0])]
    assert plan[plan.index(many[0]) + 1:] == around, "the job's shapes again after the many calls"
    assert [shape for shape, adversarial, _, _ in around if adversarial is None] == [{"M": 64, "N": 256},
                                                                                  {"M": 8193, "N": 64}]
    assert {adversarial for _, adversarial, _, _ in around} - {None} == {a.name for a in SOFTMAX.adversarial}


def test_only_a_pass_of_the_projects_judge_is_checked_and_a_check_marks_it():
    judged = runner.synthesized_result("PASS", "")
    assert not user_check.needs_check(judged), "a stand-in judge's verdict"
    judged.extra[runner.JUDGED_BY] = "bench.py"
    judged.latency_us = 50.0
    assert user_check.needs_check(judged)
    assert user_check.would_keep(judged, 100.0, 0.1) and not user_check.would_keep(judged, 52.0, 0.1)
    judged.extra[user_check.CHECKED] = "passed: 612 calls"
    assert not user_check.needs_check(judged)


def test_the_check_runs_with_an_ordinary_home_and_tmpdir_and_the_launcher_writes_no_bytecode(monkeypatch, tmp_path):
    seen = {}

    def run_child(cmd, **kwargs):
        seen.update(kwargs, cmd=cmd)
        return runner.ChildResult(returncode=0, stdout="", stderr="", timed_out=False, wall_seconds=0.1)
    monkeypatch.setattr(runner, "run_child", run_child)
    outcome = user_check.check_kernel(tmp_path / "kernel.py", kernel_type="softmax", shapes=[], dtype="float16", seed=1)
    assert not outcome.passed and "without its verdict" in outcome.message
    env = seen["env_extra"]
    for name in ("HOME", "TMPDIR", "TMP", "TEMP"):
        assert not any(word in env[name] for word in ("autokernel", "worker")), env[name]
    assert env["TRITON_CACHE_DIR"] is None and env["XDG_CACHE_HOME"] is None
    # The launcher runs before any confinement, in the repository: it must write no bytecode there (integrity.py
    # fails a candidate whose run left a .pyc), so the variable that says so stays.
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert seen["cmd"][:-2] == paths.module_command(user_check.MODULE) and str(tmp_path) not in " ".join(seen["cmd"])


def test_a_failed_checks_short_reason_says_what_failed(monkeypatch):
    # results.tsv's reason keeps a message's start: the check's explanation went first and left "...: the check
    # failed: Ke" of a KeyError.
    why = "the check failed: KeyError: \"unknown kernel type 'region_ab'\""
    monkeypatch.setattr(user_check, "check_kernel", lambda *a, **k: user_check.CheckOutcome(False, why))
    checked = user_check.keep_only_if_checked(bench_result(50.0), "kernel.py", kernel_type="softmax", shapes=[],
                                              dtype="float16", seed=1)
    assert not checked.passed and "in a user's process" in checked.message
    assert results.short_reason(checked) == f"{user_check.STAGE}: {why}"


# ---------------------------------------------------------------------- the real check, in the sandbox
def _check(kernel: Path, kernel_type: str = "softmax", shapes=()) -> user_check.CheckOutcome:
    started = time.monotonic()
    outcome = user_check.check_kernel(kernel, kernel_type=kernel_type, shapes=list(shapes), dtype="float16", seed=11)
    print(f"{kernel.name}: {time.monotonic() - started:.1f} s, {outcome}")
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_attack_is_rejected_in_the_users_process(name):
    outcome = _check(ATTACK_DIR / f"{name}.py")
    assert not outcome.passed and REJECTED[name] in outcome.message, outcome.message


@pytest.mark.slow
@pytest.mark.parametrize("kernel_type, shapes", [("softmax", [{"M": 64, "N": 256}]), ("rmsnorm", []),
                                                 ("reduce", [])])
def test_the_starters_pass_the_check(kernel_type, shapes):
    outcome = _check(ROOT / "kernels" / f"{kernel_type}.py", kernel_type, shapes)
    assert outcome.passed, outcome.message
    assert outcome.calls > user_process.CALLS["cpu"]


@pytest.mark.slow
def test_a_verdict_the_kernel_writes_itself_is_not_the_checks(tmp_path):
    # Written on every descriptor it might be (the verdict's pipe is one of them), then the process ends: without the
    # nonce, which the check read before the import, no line is a verdict.
    kernel = tmp_path / "forges.py"
    kernel.write_text("import json, os\nKERNEL_TYPE = 'softmax'\n"
                      "for fd in range(3, 64):\n"
                      "    try:\n"
                      "        os.write(fd, json.dumps({'nonce': 'x', 'passed': True}).encode() + b'\\n')\n"
                      "    except OSError:\n"
                      "        pass\n"
                      "os._exit(0)\n\n\ndef kernel_fn(x):\n    return x\n")
    outcome = _check(kernel)
    assert not outcome.passed and "without its verdict" in outcome.message, outcome.message


@pytest.mark.slow
def test_a_region_kernel_is_checked_where_only_the_loop_knows_its_region_file(tmp_path, monkeypatch):
    # Installed with `pip install .`, the run's regions live in the user's project (workspace/regions), which the
    # check's process, started in a folder of its own, cannot find by itself: every region candidate failed there
    # with "unknown kernel type". Here the region's folder is known to this process alone (not in the environment).
    from autokernel.kernel_types.regions import store
    from autokernel.profile.regions.find import find_regions
    from tests.regions import small_models

    monkeypatch.delenv(store.FOLDERS_VARIABLE, raising=False)
    [region] = find_regions(small_models.GemmSigmoidRowSum(), (small_models.rows(),)).regions
    monkeypatch.setattr(store, "_added", [tmp_path / "regions"])
    store.save(region, tmp_path / "regions")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(f"import torch\nKERNEL_TYPE = {region.name!r}\n\n\ndef kernel_fn(weight, bias, x):\n"
                      "    return torch.sigmoid(x @ weight.t() + bias).sum(dim=1, keepdim=True)\n")
    outcome = user_check.check_kernel(kernel, kernel_type=region.name, shapes=[], dtype="float32", seed=3)
    assert outcome.passed, outcome.message


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    return root


@pytest.mark.slow
def test_the_loop_keeps_no_candidate_that_fails_in_the_users_process(project):
    # The fake judge PASSes both candidates as the project's judge would (judged_by): the check decides.
    honest = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text()
    capped = honest.replace("grid = (rows,)  # BUG-SITE: grid", "grid = (min(rows, 8192),)")
    assert capped != honest
    passed = {**result(50.0), runner.JUDGED_BY: "bench.py"}
    agent = ScriptedAgent(proposal("grid capped", capped + f"\n# fake-results: [{_json(passed)}]\n"),
                          proposal("honest", honest + f"\n# fake-results: [{_json(passed)}]\n"),
                          SearchExhausted("done"))
    repo = gitops.KernelRepo(project)
    repo.start_branch("users")
    state = RunState(tag="users", jobs=[make_job(project, 1, _baseline())], kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=5))
    loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                         budget=Budget(state.settings.budget_s)).run()
    rows = results.read_rows(project / "results.tsv")
    assert [(row["status"], row["correctness"]) for row in rows] == [("baseline", "PASS"), ("revert", "FAIL"),
                                                                      ("keep", "PASS")]
    failed = agent.contexts[1].last_result
    assert failed.failed_stage == user_check.STAGE and "M=8193" in failed.message, failed.message
    assert rows[2]["description"] == "honest"


# ---------------------------------------------------------------------- the check's time, in the loop's budget
def _loop(root: Path, agent, budget_s: float) -> RunState:
    repo = gitops.KernelRepo(root)
    repo.start_branch("budget")
    state = RunState(tag="budget", jobs=[make_job(root, 1, _baseline())], kept_commit=repo.head(),
                     settings=RunSettings(budget_s=budget_s))
    return loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                                budget=Budget(budget_s)).run()


def _statuses(root: Path) -> list[str]:
    return [row["status"] for row in results.read_rows(root / "results.tsv")]


def _judged_by_bench_py(latency: float) -> dict:
    """A fake verdict as the project's judge gives it: a faster one is checked in a user's process before a keep."""
    return {**result(latency), loop.runner.JUDGED_BY: "bench.py"}


@pytest.mark.slow
def test_no_experiment_starts_that_cannot_pay_for_the_check_a_keep_runs(project, monkeypatch):
    # On CPU a keep's user's-process check took as long as a bench, unpaid: `--budget 3m` ended at 3m15s.
    def slow_check(checked, *args, **kwargs):
        time.sleep(3.0)
        return checked

    monkeypatch.setattr(loop.user_check, "keep_only_if_checked", slow_check)
    agent = ScriptedAgent(proposal("faster", source(_judged_by_bench_py(80.0))),
                          proposal("never asked", source(_judged_by_bench_py(60.0))))
    state = _loop(project, agent, budget_s=5.0)
    # After the first keep about 2 s are left: enough to ask and bench (instant here), not to check a keep (3 s).
    assert _statuses(project) == ["baseline", "keep"] and len(agent.contexts) == 1
    assert state.stopped_because.startswith(BUDGET_TOO_SHORT) and "an experiment takes about 0m03s" in \
        state.stopped_because


@pytest.mark.slow
def test_a_check_cut_short_by_the_budget_leaves_no_row(project, monkeypatch):
    limits = []

    def check_until_its_limit(checked, *args, timeout_s=loop.user_check.TIMEOUT_S, **kwargs):
        limits.append(timeout_s)
        time.sleep(min(timeout_s, 3.0))
        return bench_result(None, "TIMEOUT")

    monkeypatch.setattr(loop.user_check, "keep_only_if_checked", check_until_its_limit)
    agent = ScriptedAgent(proposal("faster", source(_judged_by_bench_py(80.0))))
    state = _loop(project, agent, budget_s=2.0)
    assert limits and limits[0] <= 2.0, "the check's limit is the budget left, not its 300 s ceiling"
    assert _statuses(project) == ["baseline"], "a budget cut is no verdict"
    assert state.experiment == 1 and state.stopped_because == BUDGET_SPENT
    assert gitops.KernelRepo(project).uncommitted_tracked_files() == []
    assert state.spent_s["experiments"] >= limits[0], "the cut experiment's time is still what the time went to"


def _json(record: dict) -> str:
    return json.dumps(record)


def _baseline() -> str:
    return source(result(100.0))


@pytest.mark.slow
def test_a_judge_worker_checks_a_final_pass_only_where_it_beats_the_best_it_was_sent(monkeypatch):
    from autokernel.core.contracts import BenchResult, JudgeTask
    from autokernel.fleet import judge_worker

    monkeypatch.setattr(judge_worker.runner, "run_bench", lambda *args, **kwargs: BenchResult.from_json(
        {**result(50.0), runner.JUDGED_BY: "bench.py"}))
    capped = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text().replace(
        "grid = (rows,)  # BUG-SITE: grid", "grid = (min(rows, 8192),)")

    def judged(best_us: float):
        return judge_worker.judge(JudgeTask(kernel_source=capped, kernel_type="softmax", shapes=[], dtype="float16",
                                            timeout_s=60, seed=1, best_us=best_us, noise=0.02), "gpu0").result
    slower = judged(best_us=50.5)        # not more than the noise faster: not kept, so not checked
    assert slower.passed and not user_check.was_checked(slower)
    faster = judged(best_us=100.0)
    assert faster.correctness == "FAIL" and faster.failed_stage == user_check.STAGE and "M=8193" in faster.message


def test_a_judge_worker_checks_within_the_limit_it_was_sent_and_says_how_long_it_took(monkeypatch):
    # The parallel loop cuts the check's limit to the budget left, as a bench's; the worker kept its 300 s ceiling.
    from autokernel.core.contracts import BenchResult, JudgeTask
    from autokernel.fleet import judge_worker

    monkeypatch.setattr(judge_worker.runner, "run_bench", lambda *args, **kwargs: BenchResult.from_json(
        {**result(50.0), runner.JUDGED_BY: "bench.py"}))
    limits = []

    def check(checked, *args, timeout_s=user_check.TIMEOUT_S, **kwargs):
        limits.append(timeout_s)
        return checked
    monkeypatch.setattr(judge_worker.user_check, "keep_only_if_checked", check)
    outcome = judge_worker.judge(JudgeTask(kernel_source=_baseline(), kernel_type="softmax", shapes=[],
                                           dtype="float16", timeout_s=60, seed=1, best_us=100.0, noise=0.02,
                                           check_timeout_s=7.0), "gpu0")
    assert limits == [7.0] and outcome.check_seconds is not None and outcome.result.passed


def test_the_parallel_loop_records_no_row_for_a_check_the_budget_cut(tmp_path):
    import io

    from rich.console import Console

    from autokernel.core.contracts import JudgeOutcome
    from autokernel.search.budget import BenchTimes
    from autokernel.search.lanes import Flight
    from autokernel.search.parallel_loop import ParallelRun

    run = ParallelRun.__new__(ParallelRun)       # only what settling a verdict reads
    run.view = ProgressView(interactive=False, console=Console(file=io.StringIO(), width=200))
    run.bench_times, committed = BenchTimes(), []
    run._commit_verdict = lambda *args, **kwargs: committed.append(args)
    cut = runner.synthesized_result("TIMEOUT", "it ran past its 3 s limit and was killed", kernel_type="softmax")
    cut.failed_stage = user_check.STAGE
    flight = Flight(proposal("faster", _baseline()), "faster", 0.0, clipped=False, check_limit_s=3.0)
    run._settle(make_job(tmp_path / "project", 1, _baseline()), None, flight, JudgeOutcome(result=cut, gpu="gpu0", seconds=3.0))
    assert committed == [] and "the budget ran out while it was checked in a user's process; not recorded" in \
        run.view.console.file.getvalue()
