"""Tests for autokernel/search/run_state.py: the run's settings and state round-trip, overrides say what changed."""

import json
from pathlib import Path

import pytest

from autokernel.core import paths
from autokernel.core.contracts import BenchResult, Job, JudgedResult, KeptVersion, RunSettings
from autokernel.core.run_records import JobProgress, RunState
from autokernel.search.run_state import StateError, load, resumable, save, state_file


# A state.json as AutoKernel wrote it while the loop held its results as dicts (BenchResult's JSON with the
# policy's figures added), made by that version's own code: a run it left must still resume.
STATE_WRITTEN_BEFORE = Path(__file__).parent / "state_files" / "state_written_before_typed_results.json"


def _judged(latency_us: float, **figures) -> JudgedResult:
    return JudgedResult(BenchResult(correctness="PASS", latency_us=latency_us, timings_meaningful=True), **figures)


def _state(**fields) -> RunState:
    baseline, best = _judged(80.0), _judged(40.0, speedup_vs_best=1.5, wins_at=["M=4,N=64"])
    progress = JobProgress(baseline=baseline, best=best, noise=0.03, experiments=4,
                           history=[{"experiment": 2}], bench_seconds={"quick": 3.5}, finishing=None,
                           last_result=best, kept=[KeptVersion("a" * 40, baseline), KeptVersion("b" * 40, best)])
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


def _as_shaped(shape, data):
    """data with only the keys `shape` has, at every depth (lists item by item)."""
    if isinstance(shape, dict) and isinstance(data, dict):
        return {key: _as_shaped(value, data.get(key)) for key, value in shape.items()}
    if isinstance(shape, list) and isinstance(data, list) and len(shape) == len(data):
        return [_as_shaped(one, other) for one, other in zip(shape, data)]
    return data


def test_a_state_written_with_dict_results_resumes_as_records_and_is_written_back_the_same(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(STATE_WRITTEN_BEFORE.read_text())
    state = load(path)
    progress = state.current
    assert isinstance(progress.baseline, JudgedResult) and isinstance(progress.last_result.bench, BenchResult)
    assert [kept.commit for kept in progress.kept] == ["a" * 40, "b" * 40]
    assert progress.best == progress.kept[-1].result
    assert progress.best.latency_us == 8.0 and progress.best.wins_at == ["M=4,N=64"]
    assert progress.best.speedup_vs_best == pytest.approx(11.0 / 8.0)
    assert progress.best.bench.timings[0]["pytorch_best_us"] == 11.0 and progress.gain() == pytest.approx(10.0 / 8.0)
    assert progress.last_result.bench.correctness == "FAIL" and progress.last_result.wins_at is None
    assert state.ahead["2_rmsnorm"].best.bench.kernel_type == "softmax"
    save(state, path)
    written, before = json.loads(path.read_text()), json.loads(STATE_WRITTEN_BEFORE.read_text())
    # The same format: every key written then is written back unchanged; the keys added since hold their defaults.
    assert _as_shaped(before, written) == before
    assert (written["model"], written["spent_s"], written["plan_caveats"]) == (None, {}, [])


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


def test_jobs_side_by_side_end_in_any_order_and_job_index_moves_past_every_ended_one(tmp_path):
    from autokernel.search import run_state

    jobs = [Job(rank=rank, kernel_type=kind, dtype="float32", shapes=[{"M": 4}], path=f"k{rank}.py")
            for rank, kind in ((1, "softmax"), (2, "reduce"), (3, "matmul"), (4, "rmsnorm"))]
    state = RunState(tag="t", jobs=jobs, kept_commit="abc", settings=RunSettings())
    second, third = (JobProgress(baseline=_judged(x), best=_judged(x), noise=0.02) for x in (2.0, 3.0))
    run_state.set_progress(state, 1, second)          # jobs 2 and 3 started beside job 1, still in its baseline
    run_state.set_progress(state, 2, third)
    assert state.current is None and set(state.ahead) == {"2_reduce", "3_matmul"}
    assert run_state.open_jobs(state) == [(1, second), (2, third)] and run_state.unfinished(state) == 4
    path = tmp_path / "state.json"
    save(state, path)
    assert load(path) == state, "the jobs side by side survive a resume"

    run_state.end_job(state, 2)                       # job 3 ends first: job 1 is still the first unfinished
    assert (state.job_index, state.ended_ahead, run_state.progress_of(state, 2)) == (0, ["3_matmul"], None)
    assert run_state.job_ended(state, 2) and not run_state.job_ended(state, 1) and run_state.unfinished(state) == 3
    run_state.end_job(state, 0)                       # job 1 ends (say, skipped): job 2 becomes the current one
    assert (state.job_index, state.current, state.ahead) == (1, second, {})
    run_state.end_job(state, 1)                       # and when it ends, job 3 (ended) is passed over for job 4
    assert (state.job_index, state.current, state.ended_ahead) == (3, None, [])
    assert [run_state.job_ended(state, index) for index in range(4)] == [True, True, True, False]
    assert run_state.index_of(state, jobs[3]) == 3 and run_state.unfinished(state) == 1


def test_the_reasoning_level_is_a_setting_a_resumed_run_keeps_and_a_flag_overrides():
    from autokernel import cli

    settings = RunSettings(reasoning="high", max_malformed=4)
    saved = RunSettings.from_json(settings.to_json())
    assert (saved.reasoning, saved.max_malformed) == ("high", 4)
    older = {key: value for key, value in settings.to_json().items() if key not in ("reasoning", "max_malformed")}
    assert (RunSettings.from_json(older).reasoning, RunSettings.from_json(older).max_malformed) == (None, 3), \
        "a state saved before these settings resumes with their defaults"
    assert "--reasoning high" in settings.describe() and "--max-malformed 4" in settings.describe()
    args = cli._build_parser().parse_args(["optimize", "--resume", "--reasoning", "low", "--max-malformed", "2"])
    given = {field: getattr(args, flag) for flag, field in cli.SETTING_FLAGS.items() if getattr(args, flag) is not None}
    updated, notes = saved.overridden(given)
    assert (updated.reasoning, updated.max_malformed) == ("low", 2)
    assert "--reasoning low overrides the run's high" in notes
