"""Tests for autokernel/search/proposals.py: with several GPUs the agent is asked off the orchestrator's thread, and the
orchestrator goes on collecting and committing verdicts meanwhile; what a reply leads to is recorded as before.

The parallel runs are tests/pool_helpers.py's: two real worker processes and tests/fake_judge.py. The LLM is
the real OpenAI agent talking to tests/fake_llm_server.py, whose replies a test holds until the loop has done
something (an order of events, not a speed). Scripted agents hold their replies the same way, on an Event.
"""

import threading
import time
from pathlib import Path

import pytest

from autokernel.agents.base import (Agent, AgentContext, AgentError, MalformedReply, RetryPolicy, SearchExhausted,
                                    WaitForResults)
from autokernel.agents.openai_agent import OpenAIAgent
from autokernel.core.contracts import Job, RunSettings
from autokernel.core.run_records import RunState
from autokernel.fleet.pool import LocalPool
from autokernel.search import results, run_state
from autokernel.search.budget import Budget
from autokernel.search.lanes import Lane
from autokernel.search.loop import OptimizationRun
from autokernel.search.loop_records import BUDGET_SPENT
from autokernel.search.proposals import Proposals, Reply
from tests.fake_llm_server import FakeLLMServer
from tests.loop_helpers import proposal
from tests.pool_helpers import git, jobs, kernel, parallel_project, parallel_run, task

GATE_S = 60             # a gate that is never opened fails the test after this long, rather than hanging it


class GatedAgent(Agent):
    """Answers each question with the next scripted step: a Proposal or an exception to raise; a step given as
    (event, step) answers only once the event is set, a callable step is called first. Not instant, so the
    parallel loop asks it on a thread of its own; it records what each question saw and where it ran."""
    name = kind = "gated"
    model = base_url = None

    def __init__(self, *script):
        self.script = list(script)
        self.asked: list[tuple[list[str], bool]] = []     # (ctx.in_flight, asked on the main thread)

    def check_endpoint(self):
        return None

    def propose(self, ctx):
        self.asked.append((list(ctx.in_flight or []), threading.current_thread() is threading.main_thread()))
        step = self.script.pop(0) if self.script else SearchExhausted("the script is done")
        if isinstance(step, tuple):
            gate, step = step
            assert gate.wait(GATE_S), "the gate was never opened"
        if callable(step) and not isinstance(step, Exception):
            step = step()
        if isinstance(step, Exception):
            raise step
        return step


def _open_after_rows(root: Path, count: int, gate: threading.Event):
    """A checkpoint that opens gate once results.tsv has `count` rows, recorded and settled."""
    def checkpoint(name):
        if name == "row settled" and len(results.read_rows(root / "results.tsv")) >= count:
            gate.set()
    return checkpoint


def _lane(kind: str = "softmax") -> Lane:
    return Lane(0, Job(rank=1, kernel_type=kind, path="k.py", shapes=[{"M": 4}], dtype="float32"))


def _reply(lane: Lane) -> Reply:
    context = AgentContext(kernel_type=lane.job.kernel_type, kernel_source="", last_result=None, history=[],
                           best_versions=[], program="", job={})
    return Reply(lane, context, started=time.monotonic(), bench_s=1.0)


# ---------------------------------------------------------------------- the questions, alone
def test_an_instant_agent_answers_on_the_callers_thread_and_any_other_on_threads_of_their_own_at_once():
    class Instant(GatedAgent):
        instant = True

    instant = Proposals(Instant(proposal("now", "source")))
    lane = _lane()
    reply = instant.ask(_reply(lane))
    assert reply.proposal.description == "now" and instant.agent.asked == [([], True)]
    assert instant.out == 0 and not lane.asking

    # Two questions out at once: each answers only once both are being answered (a barrier), so they overlap.
    both = threading.Barrier(2, timeout=GATE_S)

    def once_both_are_out(step):
        def answer():
            both.wait()
            return step
        return answer

    agent = GatedAgent(once_both_are_out(proposal("a", "source a")),
                       once_both_are_out(MalformedReply("no code", tokens_in=3, tokens_out=4)))
    proposals = Proposals(agent)
    lanes = [_lane("softmax"), _lane("reduce")]
    assert [proposals.ask(_reply(lane)) for lane in lanes] == [None, None]
    assert proposals.out == 2 and all(lane.asking for lane in lanes)
    with LocalPool([]) as idle:                     # no worker busy: the wait is for a reply alone
        taken = []
        while len(taken) < 2:
            assert proposals.next_finished(idle, GATE_S) is None
            taken += proposals.take()
    assert proposals.out == 0 and not any(lane.asking for lane in lanes)
    assert {(reply.proposal and reply.proposal.description, type(reply.error).__name__) for reply in taken} == {
        ("a", "NoneType"), (None, "MalformedReply")}
    paid = [reply.proposal or reply.error for reply in taken]
    assert sorted(item.tokens_in + item.tokens_out for item in paid) == [0, 7]
    assert [main for _, main in agent.asked] == [False, False]


def test_the_wait_for_a_verdict_ends_as_soon_as_a_reply_is_back(tmp_path, monkeypatch):
    # A worker judges a candidate for 20 s; the reply comes back first: the wait returns it, not the verdict.
    from autokernel.core import paths
    from tests.pool_helpers import make_repo

    monkeypatch.setattr(paths, "ROOT", make_repo(tmp_path / "project"))
    gate = threading.Event()
    proposals = Proposals(GatedAgent((gate, proposal("back", "source"))))
    with LocalPool([0]) as pool:
        pool.submit(task(kernel(sleep=20.0)))
        proposals.ask(_reply(_lane()))
        gate.set()
        assert proposals.next_finished(pool, 60.0) is None
        assert pool.busy, "the verdict came back first"
        assert [reply.proposal.description for reply in proposals.take()] == ["back"]


# ---------------------------------------------------------------------- in a parallel run
@pytest.mark.slow
def test_one_jobs_slow_reply_holds_up_neither_the_other_jobs_verdicts_nor_their_commits(tmp_path, monkeypatch):
    repo = parallel_project(tmp_path / "project", monkeypatch)
    root = repo.root
    softmax, reduce = "Kernel type `softmax`", "Kernel type `reduce`"
    opened = []

    def open_when_reduce_is_recorded(name):
        # Job 2's first candidate is recorded and committed: only now does job 1's reply go out.
        if name == "row settled" and not opened and any(row["description"] == "R 1 -> 2"
                                                         for row in results.read_rows(root / "results.tsv")):
            # Job 1's question goes out on a thread of its own: on a loaded machine (a CI run) its request could
            # reach the server after job 2's first row; wait for it (bounded), never for its reply.
            deadline = time.monotonic() + 60
            while not any(r.asks_for(softmax) for r in server.requests) and time.monotonic() < deadline:
                time.sleep(0.05)
            opened.append((time.monotonic(), [r for r in server.requests if r.asks_for(softmax) and not r.answered_s]))
            hold.set()

    hold = threading.Event()
    with FakeLLMServer() as server:
        server.add_kernel_reply("S 1 -> 8", kernel(8, 1), hold=hold, match=softmax)
        server.add_kernel_reply("R 1 -> 2", kernel(2, 4, kernel_type="reduce"), match=reduce)
        server.add_kernel_reply("R 1 -> 8", kernel(8, 1, kernel_type="reduce"), match=reduce)
        for number in range(3):     # asked, perhaps, while a job's last candidate is judged: not judged once it ends
            for kind, match in (("softmax", softmax), ("reduce", reduce)):
                server.add_kernel_reply(f"no faster {number}", kernel(1, 4, kernel_type=kind), match=match)
        agent = OpenAIAgent("gpt-6.1-sol", base_url=server.openai_base_url, api_key="test-key")
        state = RunState(tag="par", jobs=jobs(root, 2), kept_commit=repo.head(),
                         settings=RunSettings(max_consecutive_reverts=3, target_speedup=3.0, gpus=2))
        state = parallel_run(repo, state, agent, checkpoint=open_when_reduce_is_recorded)
        held = next(request for request in server.requests if request.asks_for(softmax))

    assert state.done
    (opened_s, pending), = opened
    assert [request is held for request in pending] == [True], "job 1's question was not out as job 2's was recorded"
    assert held.answered_s > opened_s, "the orchestrator waited for job 1's reply"
    rows = {row["description"]: row for row in results.read_rows(root / "results.tsv")}
    assert rows["R 1 -> 2"]["experiment"] < rows["S 1 -> 8"]["experiment"]
    # The records are those of any judged candidate: a keep, its GPU, its tokens and cost, its commit.
    for description, kind in (("R 1 -> 2", "reduce"), ("R 1 -> 8", "reduce"), ("S 1 -> 8", "softmax")):
        row = rows[description]
        assert (row["kernel_type"], row["status"], row["correctness"], row["llm_tokens"]) == (kind, "keep", "PASS", 150)
        assert row["gpu"] in ("gpu0", "gpu1") and row["cost_usd"] > 0
    log = git(root, "log", "--reverse", "--format=%s", "autokernel/par").splitlines()
    exps = [subject for subject in log if subject.startswith("exp ")]
    assert exps[:1] == [f"exp {rows['R 1 -> 2']['experiment']} (2_reduce): R 1 -> 2"]
    assert f"exp {rows['S 1 -> 8']['experiment']} (1_softmax): S 1 -> 8" in exps
    assert state.llm_tokens >= sum(row["llm_tokens"] or 0 for row in rows.values())


def _one_gpu_run(repo, state, agent):
    from autokernel.core.live import ProgressView

    return OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                           budget=Budget(600)).run()


@pytest.mark.slow
def test_a_malformed_reply_and_a_broken_contract_back_from_the_thread_are_recorded_as_with_one_gpu(
        tmp_path, monkeypatch):
    recorded = {}
    for gpus in (1, 2):
        repo = parallel_project(tmp_path / f"gpus{gpus}", monkeypatch)
        with FakeLLMServer() as server:     # each malformed reply is asked for again once, and is malformed again
            server.add_kernel_reply("wrong type", kernel(2, 4, kernel_type="reduce"), tokens_in=20, tokens_out=5)
            server.add_reply("no code block here", tokens_in=7, tokens_out=3)
            server.add_reply("none again", tokens_in=1, tokens_out=1)
            server.add_reply("DESCRIPTION: still no code", truncated=True)
            server.add_reply("DESCRIPTION: and again", truncated=True)
            agent = OpenAIAgent("gpt-6.1-sol", base_url=server.openai_base_url, api_key="test-key",
                                retry=RetryPolicy(max_retries=0))
            threads = []
            propose = agent.propose
            monkeypatch.setattr(agent, "propose", lambda ctx: threads.append(threading.current_thread()) or propose(ctx))
            state = RunState(tag="par", jobs=jobs(repo.root, 1), kept_commit=repo.head(),
                             settings=RunSettings(max_consecutive_reverts=3, max_malformed=2, gpus=gpus))
            state = (_one_gpu_run if gpus == 1 else parallel_run)(repo, state, agent)
        assert state.done and "2 unreadable replies in a row" in state.finished[0]["stopped_because"]
        assert len(threads) == 3 and all((thread is threading.main_thread()) == (gpus == 1) for thread in threads)
        rows = results.read_rows(repo.root / "results.tsv")
        recorded[gpus] = ([(row["status"], row["correctness"], row["description"], row["llm_tokens"],
                            row["cost_usd"], row["gpu"]) for row in rows[1:]], state.llm_tokens, state.cost_usd)
        assert [subject for subject in git(repo.root, "log", "--format=%s").splitlines() if "wrong type" in subject] \
            == [], "a broken contract was kept"
    assert recorded[2] == recorded[1]
    assert [status for status, *_ in recorded[2][0]] == ["revert"] * 3 and recorded[2][1] == 25 + 12 + 300


@pytest.mark.slow
def test_a_verdict_back_while_the_agent_said_wait_gets_it_asked_again_and_a_reply_after_the_jobs_end_is_not_judged(
        tmp_path, monkeypatch):
    repo = parallel_project(tmp_path / "project", monkeypatch)
    root = repo.root
    # Rows: 1 the baseline, 2 "first", 3 "second", both no faster (reverts). The second question is asked while
    # "first" is judged and says "wait" once its verdict is in: nothing is in flight then, so it is asked again.
    # The fourth is asked while "second" is judged, and answers once that verdict has ended the job.
    first_back, second_back = threading.Event(), threading.Event()
    agent = GatedAgent(proposal("first", kernel(1, 4)), (first_back, WaitForResults("wait for first")),
                       proposal("second", kernel(1, 4, sleep=0.5), tokens_in=1, tokens_out=1),
                       (second_back, proposal("late", kernel(2, 4), tokens_in=40, tokens_out=2)))
    checkpoints = [_open_after_rows(root, 2, first_back), _open_after_rows(root, 3, second_back)]
    state = RunState(tag="par", jobs=jobs(root, 1), kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=2, target_speedup=100.0, gpus=2))
    state = parallel_run(repo, state, agent, checkpoint=lambda name: [check(name) for check in checkpoints])

    assert [in_flight for in_flight, _ in agent.asked] == [[], ["first"], [], ["second"]]
    assert not any(main for _, main in agent.asked)
    rows = results.read_rows(root / "results.tsv")
    assert [(row["description"], row["status"]) for row in rows[1:]] == [("first", "revert"), ("second", "revert")]
    # "late" came back after "second" ended the job (2 reverts in a row): paid for, not judged.
    assert state.done and state.finished[0]["stopped_because"] == "2 reverts in a row"
    assert state.llm_tokens == 2 + 42 and not agent.script


def test_a_reply_the_budget_cannot_judge_any_more_is_paid_for_and_leaves_the_job_open(tmp_path, monkeypatch):
    repo = parallel_project(tmp_path / "project", monkeypatch)
    jump = [0.0]

    def spend_the_budget():         # the run's clock passes its budget while the agent answers
        jump[0] = 10_000.0
        return proposal("too late", kernel(2, 4), tokens_in=11, tokens_out=1)

    state = RunState(tag="par", jobs=jobs(repo.root, 1), kept_commit=repo.head(), settings=RunSettings(gpus=2))
    state = parallel_run(repo, state, GatedAgent(spend_the_budget),
                         budget=Budget(600, clock=lambda: time.monotonic() + jump[0]))

    assert not state.done and state.stopped_because == BUDGET_SPENT
    assert [row["status"] for row in results.read_rows(repo.root / "results.tsv")] == ["baseline"]
    assert "too late" not in git(repo.root, "log", "--format=%s", "autokernel/par")
    assert state.llm_tokens == 12 and [index for index, _ in run_state.open_jobs(state)] == [0]


def test_an_agent_error_back_from_the_thread_ends_the_run_as_with_one_gpu(tmp_path, monkeypatch):
    repo = parallel_project(tmp_path / "project", monkeypatch)
    state = RunState(tag="par", jobs=jobs(repo.root, 1), kept_commit=repo.head(), settings=RunSettings(gpus=2))
    with pytest.raises(AgentError, match="the key was revoked"):
        parallel_run(repo, state, GatedAgent(AgentError("the key was revoked")))
    saved = run_state.load(repo.root / "workspace" / "state.json")
    assert saved.stopped_because == "AgentError: the key was revoked" and not saved.done
    assert [row["status"] for row in results.read_rows(repo.root / "results.tsv")] == ["baseline"]
