"""Tests for autokernel/parallel_loop.py: a run over two logical GPUs reads as one run, and survives its faults.

The workers are real processes (autokernel/pool.py) running the real runner and sandbox, the agent is
the real built-in search, and the judge is tests/fake_judge.py, which times a candidate by its
TUNABLES. Faults: a worker killed in mid-experiment (a CRASH row, the run goes on), and the
orchestrator killed with SIGKILL (--resume loses no kept experiment).
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autokernel import results, run_state
from tests.pool_helpers import git, kept_rows, make_repo, run

REPO = Path(__file__).resolve().parent.parent


def _workers_of(parent: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{name}/cmdline", "rb").read()
            ppid = int(open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if b"autokernel.judge_worker" in cmdline and ppid == parent:
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
    kept = {int(s.split(":")[0][4:]) for s in subjects if s.startswith("exp ")}
    assert kept == {row["experiment"] for row in rows if row["status"] == "keep"}, "one commit per kept experiment"
    return rows


def test_two_gpus_give_one_run_with_a_gpu_column_and_throughput(tmp_path):
    root = make_repo(tmp_path / "project")
    state = run(root, gpus=2, sleep=0.3)

    assert state.done and state.stopped_because == "every kernel is done"
    rows = _check_one_run(root)
    assert len(kept_rows(root)) >= 2 and [r["status"] for r in rows].count("baseline") == 2
    assert {row["gpu"] for row in rows} == {"gpu0", "gpu1"}, "both GPUs judged experiments"
    manifest = json.loads(git(root, "show", "autokernel/par:optimized_kernels/manifest.json"))["kernels"]
    assert set(manifest) == {"1_softmax", "2_softmax"}
    for group, entry in zip(results.group_by_kernel(rows), (manifest["1_softmax"], manifest["2_softmax"])):
        # The job's best is its fastest kept version, and it beats the starter (140 us in the fake judge).
        assert entry["best_latency_us"] == results.best_version(group)["latency_us"] < 140.0
    throughput = run_state.load(root / "workspace" / "state.json").throughput     # saved, for the report
    judged = sum(row["status"] != "baseline" for row in rows)
    assert sum(use.experiments for use in throughput.gpus.values()) == judged
    assert throughput.wall_s > 0 and all(use.busy_s > 0 for use in throughput.gpus.values())


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


def test_the_orchestrator_killed_with_sigkill_resumes_without_losing_a_kept_experiment(tmp_path):
    root = make_repo(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tests.pool_helpers", str(root)]
    orchestrator = subprocess.Popen(command + ["new", "0.5"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(kept_rows(root)) < 2:
        time.sleep(0.05)
    workers = _workers_of(orchestrator.pid)
    orchestrator.send_signal(signal.SIGKILL)
    orchestrator.wait()
    kept_before = [(row["experiment"], row["description"]) for row in kept_rows(root)]
    assert len(kept_before) >= 2 and workers, "killed before the run had kept anything"
    time.sleep(0.5)
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}") and
                open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"], "workers outlived the kill"

    resumed = subprocess.run(command + ["resume", "0.5"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["done"]
    _check_one_run(root)
    kept_after = [(row["experiment"], row["description"]) for row in kept_rows(root)]
    assert kept_after[:len(kept_before)] == kept_before, "a kept experiment was lost"


def test_malformed_replies_and_broken_contracts_are_recorded_at_once_and_count_as_reverts(tmp_path, monkeypatch):
    from autokernel import gitops, paths
    from autokernel.agents.base import MalformedReply
    from autokernel.budget import Budget
    from autokernel.contracts import RunSettings, RunState
    from autokernel.live import ProgressView
    from autokernel.parallel_loop import ParallelRun
    from autokernel.pool import LocalPool
    from tests.loop_helpers import ScriptedAgent, make_project, proposal
    from tests.pool_helpers import FAKE_JUDGE, jobs

    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(paths, "BENCH_SCRIPT", FAKE_JUDGE)
    repo = gitops.KernelRepo(root)
    repo.start_branch("par")
    agent = ScriptedAgent(MalformedReply("no code block", tokens_in=5), proposal("wrong type", "KERNEL_TYPE = 'x'\n"),
                          MalformedReply("still no code"))
    state = RunState(tag="par", jobs=jobs(root, 1), kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=3, gpus=2))
    with LocalPool([0, 1]) as pool:
        state = ParallelRun(state, pool=pool, repo=repo, agent=agent, view=ProgressView(interactive=False),
                            budget=Budget(600)).run()

    assert state.done and "3 reverts in a row" in state.finished[0]["stopped_because"]
    rows = results.read_rows(root / "results.tsv")
    assert [(r["status"], r["correctness"], r["gpu"]) for r in rows] == [
        ("baseline", "PASS", "gpu0"), ("revert", "FAIL", None), ("revert", "FAIL", None), ("revert", "FAIL", None)]
    assert not agent.script, "every scripted step was asked for, and nothing more"
