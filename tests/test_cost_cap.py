"""--max-cost binds before a call, not after: no LLM call starts whose expected cost (what the last one cost) would
take the spend past the cap (autokernel/search/loop_records.py, _cost_stop). The loop's own case is in test_loop.py."""

from autokernel.core.contracts import BenchResult, RunSettings
from autokernel.core.live import ProgressView
from autokernel.core.run_records import RunState
from autokernel.search import gitops, loop, results
from autokernel.search.budget import Budget
from autokernel.search.loop_records import COST_REACHED
from tests.test_run_log import project  # noqa: F401 (the fixture)


def test_a_resumed_run_expects_its_next_call_to_cost_what_its_last_priced_one_did(project):
    """--max-cost 0.05 ended at $0.08: at $0.0396 spent a call that cost $0.0396 was started. Resumed, the run knows
    its last call's cost from its rows, and starts no call the cap cannot pay for."""
    row = results.make_row(experiment=2, tag="night", kernel_type="softmax", result=BenchResult("FAIL"),
                           description="d", status="revert", wall_seconds=1.0, llm_tokens=900, cost_usd=0.0396)
    results.append_row(project / "results.tsv", row)
    repo = gitops.KernelRepo(project)
    state = RunState(tag="night", jobs=[], kept_commit=repo.head(), cost_usd=0.0396,
                     settings=RunSettings(max_cost_usd=0.05))
    run = loop.OptimizationRun(state, repo=repo, agent=None, view=ProgressView(interactive=False), budget=Budget(600))
    assert run._cost_stop() == COST_REACHED
    state.settings = RunSettings(max_cost_usd=0.08)
    run.settings = state.settings
    assert run._cost_stop() is None
