"""The agent's replies with several GPUs, asked for off the orchestrator's thread (autokernel/search/parallel_loop.py).

An LLM takes 10 to 60 s to reply. Asked on the orchestrator's thread, it would hold everything up:
no verdict collected or committed, no other job's candidate handed out, GPUs idle. So each question
runs `agent.propose` alone on a thread of its own, and its Reply comes back through a queue the
orchestrator empties between verdicts. Only the call runs there: what a reply leads to (judging it,
recording a malformed one, the commits, the state, results.tsv) happens on the orchestrator's thread,
as before. The parallel loop asks at most one question per job in flight (Lane.asking), and no more
than there are free GPUs, each holding one for its reply.

Which agents share what across those threads:
  - an `instant` agent (the built-in search: no network, a reply in milliseconds) is asked on the
    orchestrator's thread, as before: its searches are state that its `judged` and `state_dict`
    read there, so nothing is shared and no lock is needed;
  - the LLM agents (agents/base.py ChatAgent) keep nothing from one call to the next: the tokens and
    cost go back in the Proposal (or MalformedReply), the loop keeps the history. What two calls
    share is the SDK client, whose HTTP client may be shared between threads (httpx), and the retry
    policy's random numbers (random.Random.random is thread-safe); so two questions, for two jobs,
    may overlap without a lock.
The threads are daemons: a run that stops (Ctrl-C, SIGTERM, an AgentError) does not wait for a
reply still out, and leaves nothing of it behind, since a reply is recorded only once the
orchestrator takes it back. A call left running ends by itself at its deadline (AgentContext.deadline:
the run's budget), as every LLM call does.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from autokernel.agents.base import AgentContext, Proposal
from autokernel.fleet.pool import Finished, WorkerPool
from autokernel.search.lanes import Lane

TURN_S = 0.05           # with replies out and workers busy: how often the wait looks from one to the other


@dataclass
class Reply:
    """The agent's answer to one question about a lane's job: a Proposal, or the exception it raised."""
    lane: Lane
    context: AgentContext | None        # None for a queued candidate (no question asked)
    started: float                      # when it was asked (time.monotonic()): the experiment's start
    bench_s: float                      # what a bench of the job was expected to cost then
    proposal: Proposal | None = None
    error: BaseException | None = None
    queued: bool = False                # a candidate an earlier reply queued: no question was asked, nothing paid


class Proposals:
    """The questions out to the agent; `ask` on the orchestrator's thread, the replies back through `take`."""

    def __init__(self, agent):
        self.agent = agent
        self.instant = agent.instant
        self.out = 0                                   # questions asked whose reply was not taken back yet
        self._back: queue.SimpleQueue[Reply] = queue.SimpleQueue()
        self._arrived: list[Reply] = []                # back, seen by `_wait`, not taken yet

    def ask(self, reply: Reply) -> Reply | None:
        """Ask for the reply's lane: an instant agent's reply at once; otherwise None, and it comes back in `take`."""
        if self.instant:
            _answer(self.agent, reply)
            return reply
        reply.lane.asking = True
        self.out += 1
        threading.Thread(target=self._answer_later, args=(reply,), daemon=True,
                         name=f"autokernel-agent-{reply.lane.job.name}").start()
        return None

    def _answer_later(self, reply: Reply) -> None:
        try:
            _answer(self.agent, reply)
        except BaseException as exc:        # whatever it is, the orchestrator hears of it (and raises it)
            reply.error = exc
        finally:
            self._back.put(reply)

    def next_finished(self, pool: WorkerPool, timeout_s: float) -> Finished | None:
        """The pool's next verdict, waiting up to timeout_s; None sooner, once a reply is back."""
        if not self.out:
            return pool.next_finished(timeout_s)
        if not pool.busy:
            self._wait(timeout_s)
            return None
        deadline = time.monotonic() + timeout_s
        while not self._wait(0) and time.monotonic() < deadline:    # neither wait can end the other's
            finished = pool.next_finished(TURN_S)
            if finished is not None:
                return finished
        return None

    def _wait(self, timeout_s: float) -> bool:
        """Wait up to timeout_s (0: not at all) for a reply to be back; True once one is."""
        if not self._arrived:
            try:
                self._arrived.append(self._back.get(timeout=timeout_s) if timeout_s else self._back.get_nowait())
            except queue.Empty:
                return False
        return True

    def take(self) -> list[Reply]:
        """The replies back, in the order they came; their lanes ask no more."""
        while not self._back.empty():
            self._arrived.append(self._back.get())
        taken, self._arrived = self._arrived, []
        self.out -= len(taken)
        for reply in taken:
            reply.lane.asking = False
        return taken


def _answer(agent, reply: Reply) -> None:
    try:
        reply.proposal = agent.propose(reply.context)
    except Exception as exc:            # the loop decides: WaitForResults, MalformedReply, AgentError...
        reply.error = exc
