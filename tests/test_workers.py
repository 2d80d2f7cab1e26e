"""Tests for autokernel/fleet/workers.py: which workers a run gets, and the runs it refuses."""

import pytest

from autokernel.core.contracts import RunSettings
from autokernel.core.errors import OptimizationError
from autokernel.core.live import ProgressView
from autokernel.fleet import workers
from autokernel.fleet.pool import LocalPool
from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV


def test_one_gpu_is_the_one_gpu_loop_and_two_logical_gpus_a_local_pool(monkeypatch):
    monkeypatch.setattr(workers.pools, "visible_devices", lambda: [])
    with workers.open_pool(RunSettings(), ProgressView(interactive=False)) as pool:
        assert pool is None, "without a GPU and without --gpus: one worker, the one-GPU loop"
    with workers.open_pool(RunSettings(gpus=2), ProgressView(interactive=False)) as pool:
        assert isinstance(pool, LocalPool) and pool.labels == ["gpu0", "gpu1"]
        processes = list(pool.processes.values())
    assert all(process.poll() is not None for process in processes), "the workers stop with the run"


def test_more_gpus_than_the_machine_has_and_no_confinement_are_refused(monkeypatch):
    monkeypatch.setattr(workers.pools, "visible_devices", lambda: [0, 1])
    with pytest.raises(OptimizationError, match="--gpus 3: this machine has 2 visible GPU"):
        with workers.open_pool(RunSettings(gpus=3), ProgressView(interactive=False)):
            pass
    monkeypatch.setenv(CONFINE_ENV, "0")
    with pytest.raises(OptimizationError, match="needs the sandbox's file-system confinement.*AUTOKERNEL_SANDBOX_FS=0"):
        with workers.open_pool(RunSettings(gpus=2), ProgressView(interactive=False)):
            pass


def test_every_visible_gpu_is_only_the_default_without_confinement_the_run_keeps_to_one(monkeypatch, caplog):
    monkeypatch.setattr(workers.pools, "visible_devices", lambda: [0, 1])
    monkeypatch.setenv(CONFINE_ENV, "0")
    assert workers.check(RunSettings()) == 1
    assert "using 1 of 2 GPUs" in caplog.text and "AUTOKERNEL_SANDBOX_FS=0" in caplog.text
    with pytest.raises(OptimizationError, match="--gpus 2 judges several candidates at once"):
        workers.check(RunSettings(gpus=2))          # asked for by name: refused, not quietly reduced
    monkeypatch.delenv(CONFINE_ENV)
    if runner.filesystem_confined():
        assert workers.check(RunSettings()) == 2


def test_a_new_run_that_cannot_have_its_workers_is_refused_before_it_creates_anything(tmp_path, monkeypatch):
    from tests.pool_helpers import git, make_repo, run

    root = make_repo(tmp_path / "project")
    monkeypatch.setenv(CONFINE_ENV, "0")
    with pytest.raises(OptimizationError, match="--gpus 2 judges several candidates at once"):
        run(root, gpus=2)
    assert "autokernel/par" not in git(root, "branch", "--list"), "no branch was made"
    assert not (root / "workspace" / "state.json").exists() and not (root / "results.tsv").exists()
