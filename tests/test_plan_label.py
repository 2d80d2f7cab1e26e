"""A plan's caveats (profiled on CPU, noisy, scaled to fit) follow the run: they are in its state, and its lines and
`autokernel status` show them (autokernel/search/session.py)."""

import json

from autokernel.core import paths
from autokernel.core.contracts import RunSettings
from autokernel.core.live import ProgressView
from autokernel.core.plan import Plan, write_plan
from autokernel.profile import profiler
from autokernel.search import loop, run_state, session
from tests.loop_helpers import TableAgent, fake_run_bench, make_job, make_project, result, source


def test_the_plans_caveats_are_kept_in_the_state_and_shown_by_status(tmp_path, monkeypatch):
    project = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    monkeypatch.setattr(session, "make_agent", lambda *args, **kwargs: TableAgent([]))

    def plan(log):
        paths.WORKSPACE.mkdir(exist_ok=True)
        write_plan(Plan(model="m", device="cpu", dtype="float32", entries=[], caveats=[profiler.CPU_CAVEAT]),
                   paths.WORKSPACE / profiler.PLAN_FILE)
        return [make_job(project, 1, source(result(100.0)))]

    session.run_optimization(plan=plan, settings=RunSettings(budget_s=300.0), tag="night",
                             view=ProgressView(interactive=False))
    state = run_state.load()
    assert state.plan_caveats == [profiler.CPU_CAVEAT]
    assert f"  the plan: {profiler.CPU_CAVEAT}" in session.outcome_lines(state)
    assert json.loads(run_state.state_file().read_text())["plan_caveats"] == [profiler.CPU_CAVEAT]

