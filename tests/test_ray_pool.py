"""Tests for autokernel/fleet/ray_pool.py: the same run on a local Ray cluster with two logical GPUs, and its errors.

Ray is in the test extra; the cluster is started here with ray.init(num_gpus=2) on the CPU, and the
run is `--ray auto` against it: the same worker function, the same results.tsv and git history as
the local pool (tests/test_parallel_loop.py), with the judge tests/fake_judge.py.
"""

import builtins

import pytest

from autokernel.core.errors import OptimizationError
from autokernel.fleet import ray_pool
from tests.pool_helpers import kernel, make_repo, run, task
from tests.test_parallel_loop import _check_one_run

ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'autokernel[ray]')")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_ray_run_gives_the_same_kind_of_results_and_history_as_the_local_pool(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    root = make_repo(tmp_path / "project")
    state = run(root, gpus=2, ray="auto", sleep=0.3)

    assert state.done
    rows = _check_one_run(root)
    assert [r["status"] for r in rows].count("baseline") == 2 and any(r["status"] == "keep" for r in rows)
    gpus = {row["gpu"] for row in rows}
    assert len(gpus) == 2 and all("/gpu" in gpu for gpu in gpus), "each row names the node and GPU of its actor"
    assert set(state.throughput.gpus) == gpus


@pytest.mark.slow
def test_actors_are_pinned_keyless_and_one_that_dies_is_a_crash(cluster, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    pool = ray_pool.connect("auto", 2)
    try:
        outcomes = pool.judge_all([task(kernel(1, 4)), task(kernel(2, 4))])
        assert [o.result.correctness for o in outcomes] == ["PASS", "PASS"]
        assert all("keys seen: none" in o.result.message for o in outcomes)
        assert sorted(o.result.message.split("CUDA_VISIBLE_DEVICES=")[1] for o in outcomes) == ["0", "1"]
        slot = pool.submit(task(kernel(1, 4, sleep=30.0)), "slow")
        ray.kill(pool.actors[slot])
        finished = pool.next_finished(60)
        assert finished.token == "slow" and finished.outcome.result.correctness == "CRASH"
        assert "died in mid-experiment" in finished.outcome.result.message
        (again,) = pool.judge_all([task(kernel(8, 1))])
        assert again.result.correctness == "PASS", "a new actor took the GPU"
    finally:
        pool.close()


def test_clear_errors_without_ray_or_a_cluster(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(OptimizationError, match=r"pip install 'autokernel\[ray\]'"):
        ray_pool.connect("auto", None)
    monkeypatch.setattr(builtins, "__import__", real_import)
    with pytest.raises(OptimizationError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        ray_pool._check_reachable("127.0.0.1:1")
    with pytest.raises(OptimizationError, match="give 'auto' or a cluster address"):
        ray_pool._check_reachable("nowhere")
