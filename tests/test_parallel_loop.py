"""Tests for autokernel/search/parallel_loop.py: a run over two logical GPUs reads as one run, and survives its faults.

The workers are real processes (autokernel/fleet/pool.py) running the real runner and sandbox, the agent is
the real built-in search, and the judge is tests/fake_judge.py, which times a candidate by its
TUNABLES. Faults: a worker killed in mid-experiment (a CRASH row, the run goes on), and the
orchestrator killed with SIGKILL, or stopped with SIGTERM while its LLM agent's replies are still
out (--resume loses no kept experiment, and a reply still out leaves nothing).
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autokernel.search import results, run_state
from tests.fake_llm_server import FakeLLMServer
from tests.pool_helpers import git, kept_rows, kernel, make_repo, run

REPO = Path(__file__).resolve().parent.parent


def _workers_of(parent: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{name}/cmdline", "rb").read()
            ppid = int(open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if b"autokernel.fleet.judge_worker" in cmdline and ppid == parent:
            found.append(int(name))
    return found


def _has_children(pid: int) -> bool:
    try:
        return bool(open(f"/proc/{pid}/task/{pid}/children").read().split())
    except OSError:
        return False


def _check_one_run(root: Path) -> list[dict]:
    """results.tsv and the branch tell the same story: numbers in order, one commit per kept experiment."""
    rows = results.read_rows(root / "results.tsv")
    assert [row["experiment"] for row in rows] == list(range(1, len(rows) + 1))
    log = git(root, "log", "--format=%s%x1f%(trailers:key=AutoKernel-Run,valueonly)", "autokernel/par").splitlines()
    subjects = [line.split("\x1f")[0] for line in log if line]
    assert all(line.split("\x1f")[1].strip() == "par" for line in log[:-1] if line), "every commit is the run's"
    kept = {int(re.match(r"exp (\d+) \(\d+_\w+\): ", s).group(1)) for s in subjects if s.startswith("exp ")}
    assert kept == {row["experiment"] for row in rows if row["status"] == "keep"}, "one commit per kept experiment"
    return rows


def _job_times_at_finish(root: Path, found: list):
    """A checkpoint: as a job's best is saved, its own time (JobProgress.elapsed_s) and its time in flight."""
    def capture(name):
        if name == "finish: in flight":
            saved = run_state.load(root / "workspace" / "state.json")
            for index, progress in run_state.open_jobs(saved):
                if progress.finishing:
                    name = saved.jobs[index].name
                    found.append((name, progress.elapsed_s,
                                  saved.throughput.wall_s - saved.throughput.jobs[name].started_s))
    return capture


@pytest.mark.slow
def test_two_jobs_run_side_by_side_on_two_gpus_and_still_read_as_one_run(tmp_path):
    root = make_repo(tmp_path / "project")
    job_times = []
    state = run(root, gpus=2, sleep=0.3, checkpoint=_job_times_at_finish(root, job_times))

    assert state.done and state.stopped_because == "every kernel is done"
    rows = _check_one_run(root)
    assert len(kept_rows(root)) >= 2 and [r["status"] for r in rows].count("baseline") == 2
    assert {row["gpu"] for row in rows} == {"gpu0", "gpu1"}, "both GPUs judged experiments"
    # Side by side: job 2's baseline started before job 1 ended (and the other way round), by the times
    # recorded on the loop's clock, and the rows of the two jobs interleave.
    spans = run_state.load(root / "workspace" / "state.json").throughput.jobs
    assert spans["2_reduce"].started_s < spans["1_softmax"].ended_s
    assert spans["1_softmax"].started_s < spans["2_reduce"].ended_s
    numbers = {kind: [row["experiment"] for row in rows if row["kernel_type"] == kind] for kind in ("softmax", "reduce")}
    assert min(numbers["reduce"]) < max(numbers["softmax"]) and min(numbers["softmax"]) < max(numbers["reduce"])
    manifest = json.loads(git(root, "show", "autokernel/par:optimized_kernels/manifest.json"))["kernels"]
    assert set(manifest) == {"1_softmax", "2_reduce"}
    for group in results.group_by_kernel(rows):
        name = {"softmax": "1_softmax", "reduce": "2_reduce"}[group[0]["kernel_type"]]
        # The job's best is its fastest kept version, and it beats the starter (140 us in the fake judge).
        assert manifest[name]["best_latency_us"] == results.best_version(group)["latency_us"] < 140.0
        # Saved from its own last kept commit, whatever the tree held when the job ended.
        commit = manifest[name]["source_commit"]
        assert re.match(rf"(exp \d+ \({name}\)|baseline {name}): ", git(root, "log", "-1", "--format=%s", commit))
        assert git(root, "show", f"autokernel/par:optimized_kernels/{name}.py") == git(root, "show", f"{commit}:kernel.py")
    # Each job's time is its own wall time: no more than it was in flight after its baseline's verdict,
    # though its candidates overlapped (the sum of their times is more). A row's seconds are rounded to 0.01.
    assert {name for name, *_ in job_times} == {"1_softmax", "2_reduce"}
    for name, own_s, in_flight_s in job_times:
        kind = name.split("_", 1)[1]
        baseline_s = next(row["wall_seconds"] for row in rows if row["kernel_type"] == kind)
        assert own_s <= in_flight_s - baseline_s + 0.005
        if name == "1_softmax":         # the first job has first call on a free GPU: two candidates at once
            candidates_s = [row["wall_seconds"] for row in rows if row["kernel_type"] == kind][1:]
            assert sum(candidates_s) - own_s > 0.005 * len(candidates_s), "job 1 never had two candidates at once"
    throughput = run_state.load(root / "workspace" / "state.json").throughput     # saved, for the report
    judged = sum(row["status"] != "baseline" for row in rows)
    assert sum(use.experiments for use in throughput.gpus.values()) == judged
    assert throughput.wall_s > 0 and all(use.busy_s > 0 for use in throughput.gpus.values())


@pytest.mark.slow
def test_a_worker_killed_mid_experiment_is_a_crash_row_and_the_run_goes_on(tmp_path):
    root = make_repo(tmp_path / "project")
    killed = []

    def kill_a_busy_worker(name):
        # The orchestrator is settling one verdict; the other worker is in the middle of judging.
        if name == "experiment: in flight" and not killed:
            busy = [pid for pid in _workers_of(os.getpid()) if _has_children(pid)]
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])

    state = run(root, gpus=2, sleep=1.0, checkpoint=kill_a_busy_worker)

    assert killed, "no worker was busy when a verdict was settled"
    assert state.done
    rows = _check_one_run(root)
    crashed = [row for row in rows if row["correctness"] == "CRASH"]
    assert len(crashed) == 1 and crashed[0]["status"] == "revert" and crashed[0]["gpu"] in ("gpu0", "gpu1")
    assert rows[-1]["experiment"] > crashed[0]["experiment"], "the run went on after the crash"


def _both_jobs_open_with_two_keeps(root: Path) -> bool:
    try:
        saved = run_state.load(root / "workspace" / "state.json")
    except run_state.StateError:
        return False
    return len(run_state.open_jobs(saved)) == 2 and len(kept_rows(root)) >= 2


def _llm_with_replies_held(hold: threading.Event) -> FakeLLMServer:
    """Per job (by its kernel type): a reply that is kept, one held until `hold` is set, then replies no
    faster than the baseline, so that after a resume each job ends by its reverts in a row."""
    server = FakeLLMServer().start()
    for kind in ("softmax", "reduce"):
        match = f"Kernel type `{kind}`"
        server.add_kernel_reply(f"{kind} A 1 -> 2", kernel(2, 4, kernel_type=kind), match=match)
        server.add_kernel_reply(f"{kind} held", kernel(4, 4, kernel_type=kind), hold=hold, match=match)
        for number in range(8):          # at most 3 are judged; the others may be asked before the 3rd verdict
            server.add_kernel_reply(f"{kind} no faster {number}", kernel(1, 4, kernel_type=kind), match=match)
    return server


@pytest.mark.slow
@pytest.mark.parametrize("agent, stop", [("builtin", signal.SIGKILL), ("llm", signal.SIGKILL), ("llm", signal.SIGTERM)],
                         ids=["builtin-sigkill", "llm-sigkill", "llm-sigterm"])
def test_the_orchestrator_killed_or_stopped_with_two_jobs_in_flight_resumes_without_losing_a_kept_experiment(
        tmp_path, agent, stop):
    root = make_repo(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    hold = threading.Event()
    server = _llm_with_replies_held(hold) if agent == "llm" else None
    command = [sys.executable, "-m", "tests.pool_helpers", str(root)]
    arguments = ["0.5"] + ([server.openai_base_url] if server else [])
    try:
        orchestrator = subprocess.Popen(command + ["new", *arguments], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        # With the LLM: each job's second question is out, its reply held, when the signal comes.
        while time.monotonic() < deadline and not (_both_jobs_open_with_two_keeps(root)
                                                   and (server is None or len(server.requests) == 4)):
            time.sleep(0.05)
        workers = _workers_of(orchestrator.pid)
        orchestrator.send_signal(stop)
        orchestrator.wait()
        if server:      # the held replies are still unanswered now that the orchestrator has ended
            assert len(server.requests) == 4, "stopped before each job's held reply was asked for"
            unanswered = [request for request in server.requests if request.answered_s is None]
            assert len(unanswered) == 2, "the orchestrator waited for a held reply before it ended"
            hold.set()
        kept_before = [(row["experiment"], row["description"]) for row in kept_rows(root)]
        assert len(kept_before) >= 2 and workers, "stopped before the run had two jobs in flight and two keeps"
        time.sleep(0.5)
        assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}") and
                    open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"], "workers outlived the kill"
        if stop == signal.SIGTERM:
            assert run_state.load(root / "workspace" / "state.json").stopped_because == "interrupted (SIGTERM)"

        resumed = subprocess.run(command + ["resume", *arguments], cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=300)
    finally:
        hold.set()
        if server:
            server.stop()
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["done"]
    rows = _check_one_run(root)
    kept_after = [(row["experiment"], row["description"]) for row in kept_rows(root)]
    assert kept_after[:len(kept_before)] == kept_before, "a kept experiment was lost"
    assert [row["status"] for row in rows].count("baseline") == 2, "a job started before the kill started over"
    assert not [row for row in rows if "held" in row["description"]], "a reply still out at the kill was recorded"


def test_malformed_replies_and_broken_contracts_are_recorded_at_once_each_on_its_own_count(tmp_path, monkeypatch):
    from autokernel.agents.base import MalformedReply
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from tests.loop_helpers import ScriptedAgent, proposal
    from tests.pool_helpers import jobs, parallel_project, parallel_run

    repo = parallel_project(tmp_path / "project", monkeypatch)
    root = repo.root
    agent = ScriptedAgent(MalformedReply("no code block", tokens_in=5), proposal("wrong type", "KERNEL_TYPE = 'x'\n"),
                          MalformedReply("still no code"), MalformedReply("no code again"))
    state = RunState(tag="par", jobs=jobs(root, 1), kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=3, max_malformed=2, gpus=2))
    state = parallel_run(repo, state, agent)

    assert state.done and "2 unreadable replies in a row" in state.finished[0]["stopped_because"]
    rows = results.read_rows(root / "results.tsv")
    assert [(r["status"], r["correctness"], r["gpu"]) for r in rows] == [
        ("baseline", "PASS", "gpu0")] + [("revert", "FAIL", None)] * 4
    assert not agent.script, "every scripted step was asked for, and nothing more"


@pytest.mark.slow
def test_the_candidates_of_one_reply_are_judged_side_by_side(tmp_path, monkeypatch):
    from autokernel.agents.openai_agent import OpenAIAgent
    from autokernel.agents.reply import format_reply
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from tests.pool_helpers import jobs, parallel_project, parallel_run

    repo = parallel_project(tmp_path / "project", monkeypatch)
    with FakeLLMServer() as server:      # both reach the target (the starter takes 140 us): no third question
        server.add_reply(format_reply("A 1 -> 8, B 4 -> 1", kernel(8, 1, sleep=0.5), "two knobs at once")
                         + format_reply("A 1 -> 8, B 4 -> 2", kernel(8, 2, sleep=0.5), "one knob less"))
        agent = OpenAIAgent("gpt-6.1-sol", base_url=server.openai_base_url, api_key="test-key")
        state = RunState(tag="par", jobs=jobs(repo.root, 1), kept_commit=repo.head(),
                         settings=RunSettings(gpus=2, target_speedup=2.0))
        state = parallel_run(repo, state, agent)
        asked = len(server.requests)
    rows = results.read_rows(repo.root / "results.tsv")[1:]
    assert asked == 1 and sorted(r["description"] for r in rows) == ["A 1 -> 8, B 4 -> 1", "A 1 -> 8, B 4 -> 2"]
    assert {r["gpu"] for r in rows} == {"gpu0", "gpu1"}, "each on a GPU of its own"
    assert sorted(r["llm_tokens"] for r in rows) == [0, 150], "the reply is paid once, with its first candidate"
    assert state.done and "over its baseline" in state.finished[0]["stopped_because"]


@pytest.mark.slow
def test_a_revert_of_one_job_never_undoes_another_jobs_keep_and_each_job_has_its_own_rules(tmp_path, monkeypatch):
    from autokernel.agents.base import WaitForResults
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from tests.loop_helpers import proposal
    from tests.pool_helpers import JobScriptAgent, jobs, kernel, parallel_project, parallel_run

    repo = parallel_project(tmp_path / "project", monkeypatch)
    root = repo.root
    made = jobs(root, 2)
    starter = Path(made[0].path).read_text()
    # Job 1 reverts a quick candidate, then a slow one, waiting for each; meanwhile job 2 keeps a
    # candidate on the other GPU: its keep is recorded between job 1's two reverts. The fake judge
    # holds each of the later two until the row before it is recorded, so the order never rests on
    # which of two sleeps ends first on a loaded machine.
    quick_recorded, keep_recorded = tmp_path / "quick-recorded", tmp_path / "keep-recorded"
    faster = kernel(2, 4, kernel_type="reduce", wait_for=quick_recorded)
    fastest = kernel(4, 4, sleep=0.3, kernel_type="reduce")
    agent = JobScriptAgent({
        "softmax": [proposal("quick, no faster", kernel(1, 4, sleep=0.2)), WaitForResults("wait"),
                    proposal("slow, no faster", kernel(1, 4, wait_for=keep_recorded)), WaitForResults("wait")],
        # Job 2 waits for its first result before its second candidate: with both in flight at once, the
        # second could take job 1's GPU between job 1's two baseline runs, and be kept before the first.
        "reduce": [proposal("A 1 -> 2", faster), WaitForResults("wait"), proposal("A 2 -> 4", fastest)]})

    def mark_recorded(name):
        if name == "row settled":
            last = results.read_rows(root / "results.tsv")[-1]["description"]
            flag = {"quick, no faster": quick_recorded, "A 1 -> 2": keep_recorded}.get(last)
            if flag is not None:
                flag.touch()

    state = RunState(tag="par", jobs=made, kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=2, target_speedup=100.0, gpus=2))
    state = parallel_run(repo, state, agent, checkpoint=mark_recorded)

    assert state.done
    rows = _check_one_run(root)
    verdicts = [(row["kernel_type"], row["status"], row["description"]) for row in rows if row["status"] != "baseline"]
    assert verdicts.index(("softmax", "revert", "quick, no faster")) < verdicts.index(("reduce", "keep", "A 1 -> 2")) \
        < verdicts.index(("softmax", "revert", "slow, no faster")), f"not the order this test is about: {verdicts}"
    # Job 2's keeps are on the branch, and job 1's reverted candidates are not; each job saved its own best.
    log = git(root, "log", "--format=%s", "autokernel/par")
    assert "(2_reduce): A 1 -> 2" in log and "(2_reduce): A 2 -> 4" in log and "(1_softmax)" not in log
    assert git(root, "show", "autokernel/par:optimized_kernels/2_reduce.py") == fastest
    assert git(root, "show", "autokernel/par:optimized_kernels/1_softmax.py") == starter
    # The rules are each job's own: job 2's keep between job 1's two reverts did not reset job 1's count.
    ended = {entry["file"]: entry["stopped_because"] for entry in state.finished}
    assert ended == {"1_softmax.py": "2 reverts in a row",
                     "2_reduce.py": "the agent has nothing left to try (reduce: the script is done)"}


@pytest.mark.slow
def test_the_budget_stops_every_job_in_flight_and_resume_goes_on_with_each(tmp_path, monkeypatch):
    from autokernel.agents.builtin import BuiltinAgent
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from autokernel.search import session
    from autokernel.search.budget import Budget
    from autokernel.search.loop_records import BUDGET_SPENT
    from tests.pool_helpers import jobs, parallel_project, parallel_run

    repo = parallel_project(tmp_path / "project", monkeypatch)
    root = repo.root
    jump = [0.0]

    def spend_the_budget(name):       # the run's one clock jumps past its budget after the 4th row
        if name == "row settled" and results.last_experiment(root / "results.tsv") >= 4:
            jump[0] = 10_000.0

    settings = RunSettings(max_consecutive_reverts=100, target_speedup=100.0, gpus=2)
    state = RunState(tag="par", jobs=jobs(root, 2, sleep=0.3), kept_commit=repo.head(), settings=settings)
    state = parallel_run(repo, state, BuiltinAgent(), budget=Budget(600, clock=lambda: time.monotonic() + jump[0]),
                         checkpoint=spend_the_budget)

    assert not state.done and state.stopped_because == BUDGET_SPENT
    assert [index for index, _ in run_state.open_jobs(state)] == [0, 1], "both jobs stay open for --resume"
    lines = session.outcome_lines(state)
    assert any(line.startswith("  1_softmax: cut short") for line in lines)
    assert any(line.startswith("  2_reduce: cut short") for line in lines)
    stopped_at = state.experiment

    saved = run_state.load(root / "workspace" / "state.json")
    agent = BuiltinAgent()
    agent.load_state(saved.agent_state)
    state = parallel_run(repo, saved, agent, budget=Budget(saved.elapsed_s + 600, used_before_s=saved.elapsed_s))

    assert state.done and {entry["file"] for entry in state.finished} == {"1_softmax.py", "2_reduce.py"}
    rows = _check_one_run(root)
    assert [row["status"] for row in rows].count("baseline") == 2, "a resumed job was benched from scratch"
    assert {row["kernel_type"] for row in rows if row["experiment"] > stopped_at} == {"softmax", "reduce"}


def test_the_parallel_loops_own_check_of_an_unchecked_keep_is_bounded_by_the_budget(tmp_path, monkeypatch):
    # Its safety net (a keep its worker did not check) ran with the check's 300 s ceiling whatever the budget left.
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from autokernel.core.contracts import BenchResult, JudgedResult
    from autokernel.core.live import ProgressView
    from autokernel.core.run_records import JobProgress
    from autokernel.judge import runner, user_check
    from autokernel.search.budget import BenchTimes, Budget
    from autokernel.search.lanes import Flight
    from autokernel.search.parallel_loop import ParallelRun
    from tests.loop_helpers import bench_result, make_job, proposal, result, source

    limits = []

    def check_until_its_limit(checked, *args, timeout_s=user_check.TIMEOUT_S, **kwargs):
        limits.append(timeout_s)
        cut = runner.synthesized_result("TIMEOUT", "it ran past its limit and was killed", kernel_type="softmax")
        cut.failed_stage = user_check.STAGE
        return cut
    monkeypatch.setattr(user_check, "keep_only_if_checked", check_until_its_limit)
    run = ParallelRun.__new__(ParallelRun)       # only what a verdict reads before it is written
    run.view = ProgressView(interactive=False, console=Console(file=io.StringIO(), width=200))
    run.bench_times, run.budget, run._seed, run.state = BenchTimes(), Budget(2.0), 1, SimpleNamespace(experiment=0)
    best = JudgedResult(bench_result(100.0))
    progress = JobProgress(baseline=best, best=best, noise=0.02)
    unchecked = JudgedResult(BenchResult.from_json({**result(50.0), runner.JUDGED_BY: "bench.py"}))
    baseline = source(result(100.0))
    run._commit_verdict(make_job(tmp_path, 1, baseline), progress, Flight(proposal("faster", baseline), "faster", 0.0,
                                                                          clipped=False), unchecked, gpu="gpu0")
    assert limits and limits[0] <= 2.0, "the check's limit is the budget left, not its 300 s ceiling"
    assert "faster: not finished, the budget ran out while it was checked in a user's process; not recorded" in \
        run.view.console.file.getvalue()

