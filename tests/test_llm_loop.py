"""The one-GPU loop with the real LLM agents: both SDK clients against tests/fake_llm_server.py, the judge faked
(tests/loop_helpers.py: each candidate file says what its bench gives).

What the model is shown after a CRASH and a FAIL (the failed candidate, its whole error), a fix of it judged as an
experiment, a reply asked again once, diffs, edits, a fence in a docstring, a reply of two candidates, the prompt
cache's marks, the reasoning setting, and the cached and reasoning tokens in results.tsv.
"""

import json
import re
from pathlib import Path

import pytest

from autokernel.agents.anthropic_agent import AnthropicAgent
from autokernel.agents.base import RetryPolicy
from autokernel.agents.edits import unified
from autokernel.agents.openai_agent import OpenAIAgent
from autokernel.core.contracts import RunSettings
from autokernel.core.run_records import RunState
from autokernel.core.live import ProgressView
from autokernel.search import gitops, loop, results
from autokernel.search.budget import Budget
from tests.fake_llm_server import FakeLLMServer, system_of, text_of
from tests.loop_helpers import fake_run_bench, make_job, make_project, result, source

KINDS = pytest.mark.parametrize("kind", ["anthropic", "openai"])
ERROR_TAIL = "END-OF-THE-WHOLE-ERROR"


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    (root / "program.md").write_text((Path(__file__).resolve().parents[1] / "program.md").read_text())
    return root


def candidate(planned: dict, body: str = "    return x") -> str:
    """A candidate the fake judge gives `planned`, with a docstring that shows a fenced example."""
    return source(planned).replace("def kernel_fn(x):\n    return x\n",
                                   'def kernel_fn(x):\n    """Softmax.\n\n```\ny = kernel_fn(x)\n```\n    """\n'
                                   f"{body}\n")


def agent_for(kind: str, server: FakeLLMServer, **options):
    retry = RetryPolicy(max_retries=0)
    if kind == "anthropic":
        return AnthropicAgent("claude-sonnet-5-5", base_url=server.anthropic_base_url, api_key="k", retry=retry,
                              **options)
    return OpenAIAgent("gpt-6.1-sol", base_url=server.openai_base_url, api_key="k", retry=retry, **options)


def run(root: Path, agent, **settings) -> RunState:
    repo = gitops.KernelRepo(root)
    repo.start_branch("llm")
    state = RunState(tag="llm", jobs=[make_job(root, 1, source(result(100.0)))], kept_commit=repo.head(),
                     settings=RunSettings(**settings))
    return loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                                budget=Budget(600)).run()


def user_text(request) -> str:
    return "\n".join(text_of(m["content"]) for m in request.body["messages"] if m["role"] == "user")


@pytest.mark.slow
@KINDS
def test_after_a_crash_and_a_fail_the_model_sees_the_candidate_and_its_whole_error_and_its_fixes_are_judged(
        kind, project):
    crash = {"correctness": "CRASH", "failed_stage": "load", "message": "NameError: name 'tl_load' is not defined "
             "(at kernel.py:12: y = tl_load(x)) -- " + "traceback line " * 300 + ERROR_TAIL}
    crashing = candidate(crash, body="    y = tl_load(x)\n    return y")
    failing = candidate({"correctness": "FAIL", "failed_stage": "stability", "message": "large values: inf"},
                        body="    y = x\n    return y")
    fixed = candidate(result(40.0), body="    y = x\n    return y")
    failing_line = failing.splitlines()[1]
    edit = f"<<<<<<< SEARCH\n{failing_line}\n=======\n{fixed.splitlines()[1]}\n>>>>>>> REPLACE\n"
    with FakeLLMServer() as server:
        server.add_kernel_reply("load through tl_load", crashing, hypothesis="one load helper",
                                tokens_in=3000, tokens_cached=2000, tokens_out=800, tokens_reasoning=500)
        server.add_reply("FIX OF: exp 2\nHYPOTHESIS: the name was wrong\nDESCRIPTION: plain load\n```diff\n"
                         + unified(crashing, failing, "a/kernel.py", "b/kernel.py") + "\n```\n")
        server.add_reply(f"FIX OF: exp 3\nDESCRIPTION: no overflow\n```text\n{edit}```\n")
        state = run(project, agent_for(kind, server, reasoning="low"), target_speedup=2.0)
        requests = server.requests

    rows = results.read_rows(project / "results.tsv")
    assert [(r["experiment"], r["status"], r["correctness"], r["description"]) for r in rows] == [
        (1, "baseline", "PASS", rows[0]["description"]), (2, "revert", "CRASH", "load through tl_load"),
        (3, "revert", "FAIL", "fix 1 of exp 2: plain load"), (4, "keep", "PASS", "fix 2 of exp 3: no overflow")]
    assert state.finished[0]["stopped_because"] == "2.50x over its baseline"
    assert (project / "kernel.py").read_text() == fixed, "the fixed candidate, its docstring's fence intact"

    after_crash, after_fail = user_text(requests[1]), user_text(requests[2])
    assert "## The last candidate failed: exp 2 (load through tl_load), CRASH at load" in after_crash
    assert crash["message"] in after_crash, "the whole error, not 120 characters of it"
    assert ">  12 |     y = tl_load(x)" in after_crash and "Its hypothesis: one load helper" in after_crash
    assert "+    y = tl_load(x)" in after_crash or crashing.rstrip() in after_crash
    assert "## The last candidate failed: exp 3 (fix 1 of exp 2: plain load), FAIL at stability" in after_fail
    assert "large values: inf" in after_fail and "fix 2 of 2 for this idea" in after_fail
    assert "| 2 | revert | - | - | 98.04 | CRASH at load: NameError" in after_fail

    systems = [system_of(request.body) for request in requests]
    assert len(set(systems)) == 1 and len(systems[0]) <= 12_000, "one stable system message per job"
    assert "### Softmax" in systems[0] and "CUDA C++" not in systems[0]
    if kind == "anthropic":
        for request in requests:
            assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}
            assert request.body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
            assert request.body["output_config"] == {"effort": "low"}
    else:
        assert all(request.body["reasoning_effort"] == "low" for request in requests)
        assert len({request.body["messages"][1]["content"].split("## Latest measured")[0] for request in requests}) == 1

    # The reply's tokens, with the cached and reasoning ones apart, and its cost at the cached rate.
    assert (rows[1]["llm_tokens"], rows[1]["llm_cached_tokens"], rows[1]["llm_reasoning_tokens"]) == (3800, 2000, 500)
    cached_rate = {"anthropic": 2.0 * 0.1, "openai": 0.2}[kind]       # per million; $2 input, $10 output
    assert rows[1]["cost_usd"] == pytest.approx((1000 * 2.0 + 2000 * cached_rate + 800 * 10.0) / 1e6, rel=1e-5)
    assert (state.llm_cached_tokens, state.llm_reasoning_tokens) == (2000, 500)


@KINDS
def test_a_malformed_reply_is_asked_again_a_diff_and_two_candidates_are_read_and_the_job_goes_on(
        kind, project, capsys):
    starter = source(result(100.0))
    slower = starter.replace('"latency_us": 100.0', '"latency_us": 120.0')
    other = starter.replace('"latency_us": 100.0', '"latency_us": 30.0')
    faster = candidate(result(40.0))
    with FakeLLMServer() as server:
        server.add_reply("I would make the block bigger.")
        server.add_reply("HYPOTHESIS: bigger blocks\nDESCRIPTION: as a diff\n```diff\n"
                         + unified(starter, slower, "a/kernel.py", "b/kernel.py") + "\n```\n\n"
                         "DESCRIPTION: a second idea\n```python\n" + other + "```\n")
        server.add_reply("Still thinking.")
        server.add_reply("No code yet.")
        server.add_kernel_reply("docstring with a fence", faster)
        state = run(project, agent_for(kind, server), max_consecutive_reverts=2, target_speedup=2.0)
        requests = server.requests

    rows = results.read_rows(project / "results.tsv")
    assert [(r["status"], r["correctness"], r["description"]) for r in rows[1:]] == [
        ("revert", "PASS", "as a diff"), ("revert", "FAIL", "malformed reply"), ("keep", "PASS", "docstring with a fence")]
    assert state.finished[0]["stopped_because"] == "2.50x over its baseline", "malformed replies are not reverts"
    assert (project / "kernel.py").read_text() == faster
    assert "Your reply could not be used: no ```python code block" in user_text(requests[1])
    log = capsys.readouterr().out
    assert re.search(r'the reply held 2 candidates; only the first is taken: judging "as a diff"', log)
    assert "a second idea" not in json.dumps([r["description"] for r in rows]), "one GPU judges the one chosen"
