"""Tests for autokernel/search/run_log.py: every experiment of a run is on disk with its whole error, hypothesis,
diff, tokens and cost (workspace/runs/<tag>.jsonl), and results.tsv's row carries the short reason."""

import json
from pathlib import Path

import pytest

from autokernel.agents.base import MalformedReply, SearchExhausted
from autokernel.core.contracts import RunSettings
from autokernel.core.live import ProgressView
from autokernel.core.run_records import RunState
from autokernel.search import gitops, loop, results, run_log
from autokernel.search.budget import Budget
from tests.loop_helpers import ScriptedAgent, fake_run_bench, make_job, make_project, proposal, result, source

TRACEBACK = ('Traceback (most recent call last):\n  File "kernel.py", line 6, in kernel_fn\n'
             "NameError: name 'y' is not defined")


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    return root


def test_every_experiment_is_logged_with_its_error_hypothesis_diff_and_cost(project):
    crash = {**result(None, "CRASH"), "failed_stage": "smoke", "message": TRACEBACK}
    faster, crashing = source(result(60.0)), source(crash)
    agent = ScriptedAgent(proposal("halve it", faster, tokens_in=100, tokens_out=20, cost_usd=0.03),
                          proposal("use y", crashing, tokens_in=90, tokens_out=10, cost_usd=0.02),
                          MalformedReply("no code block", tokens_in=5, tokens_out=1),
                          SearchExhausted("done"))
    agent.script[1].hypothesis = "y is the row max, loaded once"
    repo = gitops.KernelRepo(project)
    repo.start_branch("night")
    job = make_job(project, 1, source(result(100.0)))
    state = RunState(tag="night", jobs=[job], kept_commit=repo.head(), settings=RunSettings(max_consecutive_reverts=5))
    loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                         budget=Budget(600)).run()

    lines = run_log.read("night")
    rows = results.read_rows(project / "results.tsv")
    assert [line["experiment"] for line in lines] == [row["experiment"] for row in rows] == [1, 2, 3, 4]
    baseline, keep, crashed, malformed = lines
    assert baseline["status"] == "baseline" and baseline["diff"] is None and baseline["error"] is None
    # The keep's diff is against the version it was judged against (the baseline), not against itself.
    assert "-# fake-results:" in keep["diff"] and "+# fake-results:" in keep["diff"]
    assert keep["tokens"] == {"in": 100, "out": 20, "cached": 0, "reasoning": 0} and keep["cost_usd"] == 0.03
    assert crashed["error"] == TRACEBACK and crashed["hypothesis"] == "y is the row max, loaded once"
    assert crashed["reason"] == rows[2]["reason"] == "smoke: NameError: name 'y' is not defined (kernel.py:6)"
    assert json.dumps(list(json.loads(crashing.split("# fake-results: ")[1].splitlines()[0]))) in crashed["diff"]
    assert malformed["error"] == "malformed reply: no code block" and malformed["diff"] is None
    assert rows[3]["reason"] == "malformed reply: no code block"


def test_a_line_cut_short_by_a_kill_is_skipped_and_a_resumed_number_is_taken_once(project):
    path = run_log.log_path("night")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"experiment": 2, "status": "revert"}) + "\n"
                    + json.dumps({"experiment": 2, "status": "keep"}) + "\n" + '{"experiment": 3, "sta')
    assert run_log.read("night") == [{"experiment": 2, "status": "keep"}]
    assert run_log.read("other") == [] and Path(path).parent == project / "workspace" / "runs"

