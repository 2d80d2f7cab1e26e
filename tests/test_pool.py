"""Tests for autokernel/fleet/pool.py: one worker per (logical) GPU, side by side, and a worker killed mid-experiment.

The workers are real processes running the real runner and sandbox; the judge is tests/fake_judge.py,
so a bench takes what the candidate asks for (`# fake-sleep`) and nothing else.
"""

import os
import signal
import time

import pytest

from autokernel.core import paths
from autokernel.fleet.pool import LocalPool
from tests.pool_helpers import kernel, make_repo, task

# Every test here starts real judges or the loop in child processes: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow


@pytest.fixture
def pool(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setattr(paths, "ROOT", make_repo(tmp_path / "project"))
    with LocalPool([0, 1]) as workers:
        yield workers


def test_two_workers_judge_side_by_side_each_pinned_to_its_gpu_and_without_keys(pool):
    pool.judge_all([task(kernel(1, 1)), task(kernel(1, 1))])          # both workers up (they import torch)
    started = time.monotonic()
    outcomes = pool.judge_all([task(kernel(1, 4, sleep=2.0)), task(kernel(2, 4, sleep=2.0))])
    assert [o.result.correctness for o in outcomes] == ["PASS", "PASS"]
    assert [o.result.latency_us for o in outcomes] == [140.0, 90.0], "each judged its own candidate"
    assert sorted(o.gpu for o in outcomes) == ["gpu0", "gpu1"]
    pinned = {o.gpu: o.result.message.split("CUDA_VISIBLE_DEVICES=")[1] for o in outcomes}
    assert pinned == {"gpu0": "0", "gpu1": "1"}
    assert all("keys seen: none" in o.result.message for o in outcomes), "the judge saw an API key"
    # Side by side, not in turn: the two judgings overlapped (in turn, the whole would take their sum).
    assert time.monotonic() - started < sum(o.seconds for o in outcomes)
    for pid in pool.pids().values():
        environment = open(f"/proc/{pid}/environ", "rb").read()
        assert b"sk-ant-secret" not in environment and b"sk-secret" not in environment
    assert set(pool.throughput.gpus) == {"gpu0", "gpu1"}
    assert all(use.busy_s >= 2.0 for use in pool.throughput.gpus.values()), "each GPU's busy time is counted"
    assert pool.submit(task(kernel(1, 1, sleep=1.0)), "chosen", slot=1) == 1, "the worker asked for takes it"
    with pytest.raises(ValueError, match="gpu1 is busy"):
        pool.submit(task(kernel(1, 1)), "again", slot=1)
    assert pool.next_finished(20).outcome.gpu == "gpu1"


def test_a_worker_killed_mid_experiment_loses_only_its_candidate(pool):
    pool.judge_all([task(kernel(1, 1)), task(kernel(1, 1))])          # both workers up
    slow = pool.submit(task(kernel(1, 4, sleep=30.0)), "slow")
    quick = pool.submit(task(kernel(8, 1, sleep=1.0)), "quick")
    time.sleep(0.5)
    victim = pool.pids()[pool.labels[slow]]
    os.kill(victim, signal.SIGKILL)
    finished = {f.token: f for f in (pool.next_finished(20), pool.next_finished(20))}
    assert finished["slow"].outcome.result.correctness == "CRASH"
    assert "died in mid-experiment" in finished["slow"].outcome.result.message
    assert "SIGKILL" in finished["slow"].outcome.result.message or "signal 9" in finished["slow"].outcome.result.message
    assert finished["quick"].outcome.result.correctness == "PASS"
    assert pool.pids()[pool.labels[slow]] != victim, "a new worker took the GPU"
    (again,) = pool.judge_all([task(kernel(4, 1))])
    assert again.result.correctness == "PASS" and again.result.latency_us == 35.0
