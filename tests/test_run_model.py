"""A run records the model it was given (its flags and the inputs profiled), and `autokernel verify` with no model
takes that one (autokernel/verify/run_model.py): the shapes its kernels were verified for are that model's."""

import json

from autokernel.agents.base import OutOfTime
from autokernel.core.contracts import RunSettings
from autokernel.core.live import ProgressView
from autokernel.search import run_state, session
from autokernel.verify import run_model
from tests.loop_helpers import TableAgent, make_job, result, source
from tests.test_session import _use_agent, project  # noqa: F401 (the fixture)


def test_a_new_run_records_its_model_flags_and_inputs_for_verify(project, monkeypatch):
    jobs = [make_job(project, 1, source(result(100.0)))]

    def plan(log):
        (project / "workspace" / "optimization_plan.json").write_text(json.dumps({
            "model": "m.py:Model", "device": "cpu", "dtype": "float32", "entries": [],
            "inputs": [{"shape": [1, 8], "dtype": "int64"}]}))
        return jobs

    _use_agent(monkeypatch, TableAgent([OutOfTime("stop")]))
    flags = [str(project / "m.py"), "--model-arg", "config=tiny"]
    session.run_optimization(plan=plan, settings=RunSettings(), tag="night", view=ProgressView(interactive=False),
                             model_flags=flags)
    assert run_state.load().model == {"flags": flags, "inputs": [{"shape": [1, 8], "dtype": "int64"}]}
    monkeypatch.chdir(project)
    assert run_model.recorded_flags(project / "workspace") == (
        flags, "verifying the model run night optimized: m.py --model-arg config=tiny")
    assert "  model: m.py --model-arg config=tiny (`autokernel verify` with no model checks the kernels in it)" \
        in session.outcome_lines(run_state.load())
