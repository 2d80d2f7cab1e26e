"""Tests for autokernel/run_state.py: the run's settings and state round-trip, overrides say what changed."""

import json

import pytest

from autokernel import paths
from autokernel.contracts import Job, JobProgress, RunSettings, RunState
from autokernel.run_state import StateError, load, resumable, save, state_file


def _state(**fields) -> RunState:
    progress = JobProgress(baseline={"latency_us": 80.0}, best={"latency_us": 40.0}, noise=0.03, experiments=4,
                           history=[{"experiment": 2}], bench_seconds={"quick": 3.5}, finishing=None)
    return RunState(tag="t", jobs=[Job(rank=1, kernel_type="softmax", dtype="float16", shapes=[{"M": 4, "N": 64}], path="k.py")], kept_commit="abc", return_to="main", experiment=5, current=progress,
                    settings=RunSettings(budget_s=60.0, agent="openai", llm_model="m", base_url="http://h/v1",
                                         max_cost_usd=2.5, max_consecutive_reverts=100),
                    in_flight={"step": "experiment", "number": 6}, pending_row={"experiment": 5},
                    agent_state={"searches": []}, **fields)


def test_state_round_trips_with_every_setting(tmp_path):
    path = tmp_path / "state.json"
    state = _state()
    save(state, path)
    loaded = load(path)
    assert loaded == state and loaded.current.gain() == 2.0
    assert json.loads(path.read_text())["settings"]["base_url"] == "http://h/v1"
    assert not list(tmp_path.glob("*.tmp")), "the scratch file is renamed into place"


def test_bad_or_foreign_state_is_a_clear_error(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("{}")
    with pytest.raises(StateError, match="move it aside"):
        load(path)
    path.write_text(json.dumps({**_state().to_json(), "version": 1}))
    with pytest.raises(StateError, match="state version 1"):
        load(path)
    with pytest.raises(StateError, match="nothing to resume"):
        load(tmp_path / "absent.json")


def test_overrides_change_only_what_differs_and_say_so():
    settings = RunSettings(budget_s=180.0, max_consecutive_reverts=100)
    updated, notes = settings.overridden({"budget_s": 600.0, "max_consecutive_reverts": 100, "base_url": "http://x"})
    assert (updated.budget_s, updated.max_consecutive_reverts, updated.base_url) == (600.0, 100, "http://x")
    assert notes == ["--budget 10m00s overrides the run's 3m00s", "--base-url http://x overrides the run's none"]
    with pytest.raises(ValueError, match="unknown settings"):
        settings.overridden({"budget": 1})
    assert "agent auto, budget 3m00s" in settings.describe() and "--max-reverts 100" in settings.describe()


def test_resumable_is_the_unfinished_saved_run(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "WORKSPACE", tmp_path)
    assert resumable() is None
    save(_state())
    assert resumable().tag == "t" and state_file() == tmp_path / "state.json"
    save(_state(done=True))
    assert resumable() is None
