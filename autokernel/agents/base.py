"""The agent interface the loop talks to, and the call-retry-parse flow the LLM agents share.

The loop builds an AgentContext, calls `agent.propose(ctx)` and gets back a Proposal (a complete new
kernel.py, a one-line description, the hypothesis it tests; further candidates of the same reply in
`queued`). An agent signals trouble with four exceptions: a reply it could not read even when asked
again once with the reason (MalformedReply: the loop records it, counted apart from reverts, and asks
again), an unrecoverable setup problem
(AgentError: the loop stops), nothing left to try on this kernel (SearchExhausted: the loop moves
on to the next kernel), or no reply before the context's deadline (OutOfTime: the run's budget is
spent; the loop ends cleanly). With several GPUs the loop asks while other candidates are being
judged (ctx.in_flight names them), tells the agent each verdict (`judged`), and waits when the agent
raises WaitForResults. There it asks an agent that is not `instant` on a thread of its own, one
question per job (autokernel/search/proposals.py): two jobs' questions may overlap, so such an agent
must be safe to share between threads. The LLM agents are: they keep nothing between calls but their
SDK client (autokernel/search/proposals.py says why). Every hook the loop calls is declared on Agent.

The budget binds the LLM agents: every call's timeout is the time left to the deadline, and a retry
or a Retry-After wait that would end past it is not made. Before a run, `check_endpoint()` makes one
tiny call, so a wrong URL, key or model fails within seconds, with the URL in the message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Callable

from autokernel.agents import prompt, reply
from autokernel.agents.usage import REASONING_LEVELS, Prices, Usage, cost_usd
from autokernel.core.contracts import BenchResult
from autokernel.core.hardware import Platform

log = logging.getLogger(__name__)

MIN_CALL_S = 1.0                    # no call is started with less time than this before the deadline
ENDPOINT_CHECK_TIMEOUT_S = 15.0
ENDPOINT_CHECK_TOKENS = 16
ENDPOINT_CHECK_SYSTEM = "You check that an API endpoint works."
ENDPOINT_CHECK_USER = "Reply with the word OK."


@dataclass
class AgentContext:
    """Everything an agent sees when it proposes the next experiment on one kernel."""
    kernel_type: str
    kernel_source: str                          # the current kernel.py (last kept version)
    last_result: BenchResult | None             # bench.py's result on the previous experiment; None at start
    history: list[dict]                         # recent experiments: experiment, description, status,
                                                # correctness, throughput, speedup_vs_pytorch, message
    best_versions: list[tuple[str, BenchResult]]    # up to 3 best kept (source, bench result), best first
    program: str                                # program.md text
    job: dict                                   # contracts.Job.to_json()
    deadline: float | None = None               # time.monotonic() by which a proposal must be back
    in_flight: list[str] | None = None          # with several GPUs: the candidates being judged now (descriptions)
    failure: dict | None = None                 # the last candidate, if it failed: experiment, description,
                                                # hypothesis, source, correctness, failed_stage, message, fix_turn
    older: list[dict] | None = None             # one-line summaries of experiments older than `history`
    max_candidates: int = 1                     # how many candidates one reply may hold (the free GPUs)
    platform: Platform | None = None            # the machine the prompt describes (None: this process's)
    baseline: BenchResult | None = None         # the job's starter, as measured (None: not yet)


@dataclass
class Proposal:
    description: str                            # one line: the commit message is "exp N: <description>"
    kernel_source: str                          # the complete new kernel.py
    tokens_in: int = 0                          # the reply's tokens and cost (its first candidate carries them)
    tokens_out: int = 0
    cost_usd: float | None = None
    hypothesis: str = ""                        # 2-3 lines: what it tests, kept in the history
    fix_of: int | None = None                   # the failed experiment it fixes
    fix_turn: int = 0                           # which fix of that idea it is (1 or 2; the loop numbers it)
    tokens_cached: int = 0                      # of tokens_in: read from the prompt cache
    tokens_reasoning: int = 0                   # of tokens_out: reasoning or thinking
    queued: list[Proposal] = field(default_factory=list)   # the reply's further candidates, judged after it
    note: str = ""                              # what the reading of the reply left out


class MalformedReply(Exception):
    """The reply (and the one asked for again) had no readable candidate; it still cost tokens, which the loop logs."""

    def __init__(self, message: str, *, tokens_in: int = 0, tokens_out: int = 0, cost_usd: float | None = None,
                 tokens_cached: int = 0, tokens_reasoning: int = 0):
        super().__init__(message)
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.cost_usd = cost_usd
        self.tokens_cached = tokens_cached
        self.tokens_reasoning = tokens_reasoning


class AgentError(Exception):
    """Unrecoverable (bad key, unknown model, API down past every retry): the loop stops with this message."""


class SearchExhausted(Exception):
    """The agent has nothing left to try on this kernel."""


class WaitForResults(Exception):
    """With several GPUs: nothing new worth proposing until a candidate being judged comes back."""


class OutOfTime(Exception):
    """No reply can come before the deadline (the run's budget); nothing was proposed."""


class Agent(ABC):
    """What the loop may ask of an agent: every attribute and hook it uses is declared here (tests/agents/
    test_interface.py holds the loop to that), each hook with the default an agent without it gets."""
    name: str
    kind: str                   # "anthropic", "openai" or "builtin"
    model: str | None
    base_url: str | None
    instant: bool = False       # True: replies at once, with no network call, so asked on the loop's own thread

    @abstractmethod
    def propose(self, ctx: AgentContext) -> Proposal:
        """The next candidate, or one of the exceptions above."""

    def check_endpoint(self) -> str | None:
        """Fail (AgentError) when the agent cannot work at all; a warning to show, or None."""
        return None

    def has_prices(self) -> bool:
        """Whether its costs are known, which --max-cost needs; an agent that pays nothing has none to know."""
        return True

    def state_dict(self) -> dict | None:
        """What the run's state keeps of it (RunState.agent_state) so that --resume tries nothing again; None:
        nothing, and the state keeps what it held."""
        return None

    def load_state(self, state: dict) -> None:
        """On --resume, what state_dict gave (never None)."""

    def judged(self, job: dict, source: str, result: BenchResult | None) -> None:
        """With several GPUs: the verdict on one of its candidates, proposed while others were being judged."""


@dataclass
class RetryPolicy:
    """How an LLM agent waits out transient API errors: exponential backoff with jitter, Retry-After honoured."""
    max_retries: int = 8
    base_delay_s: float = 2.0
    max_delay_s: float = 120.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic     # the clock deadlines are read on
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self):
        if self.max_retries < 0 or self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError(f"retry counts and delays must not be negative: {self}")

    def backoff_s(self, retry_number: int) -> float:
        """The wait before retry `retry_number` (0-based) when the server did not say how long."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** retry_number)
        # Half fixed so waits keep growing, half random so runs that failed together retry apart.
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)


def retry_after_s(headers) -> float | None:
    """The wait a response asks for in retry-after-ms or Retry-After (seconds or an HTTP date), if any."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(0.0, float(milliseconds) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


REASK = ("Your reply could not be used: {error}. Reply again in the format the playbook gives: HYPOTHESIS, "
         "DESCRIPTION, then the whole kernel.py in one ```python block, a ```diff block, or search/replace edits.")


@dataclass(frozen=True)
class Request:
    """One call's messages: the system message, the user message's stable first part and its changing
    rest (autokernel/agents/prompt.py), then any (assistant, user) turns after them (a re-ask)."""
    system: str
    job: str
    turn: str
    followups: tuple[tuple[str, str], ...] = ()


@dataclass
class ChatReply:
    text: str
    truncated: bool            # the API stopped at its token limit
    usage: Usage


class ChatAgent(Agent):
    """An LLM agent: prompt, one chat call with our retry policy, parse. Subclasses wrap one SDK.

    Both SDKs share their error classes' names and meaning, so the retry policy is written once
    against whichever SDK module the subclass passes in; the SDK clients' own retries are off.
    """

    instant = False             # a reply takes seconds: with several GPUs, asked on a thread of its own

    def __init__(self, *, vendor: str, sdk: ModuleType, model: str, prices: Prices, key_env: str,
                 base_url_env: str, retry: RetryPolicy | None, timeout_s: float, reasoning: str | None = None):
        if reasoning is not None and reasoning not in REASONING_LEVELS:
            raise AgentError(f"reasoning must be one of {', '.join(REASONING_LEVELS)}, not {reasoning!r}")
        self.reasoning = reasoning
        self.kind = vendor
        self.name = f"{vendor}:{model}"
        self.model = model
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self.base_url: str | None = None      # the subclass sets it once its client exists
        self._sdk = sdk
        self._prices = prices
        self._key_env = key_env
        self._base_url_env = base_url_env

    @abstractmethod
    def _complete(self, request: Request, timeout_s: float, *, max_tokens: int | None = None,
                  think: bool = True) -> ChatReply:
        """One API call, no retries; `max_tokens` overrides the agent's own limit; `think`: send the reasoning
        setting (the endpoint check's tiny call does not)."""

    @abstractmethod
    def takes_reasoning(self) -> bool:
        """Whether this model takes a reasoning or thinking setting (the request carries one only then)."""

    def has_prices(self) -> bool:
        return cost_usd(self.model, self._prices, Usage(1, 1)) is not None

    def check_endpoint(self, timeout_s: float = ENDPOINT_CHECK_TIMEOUT_S) -> str | None:
        """One tiny call: the URL answers, the key is accepted and the model exists, or AgentError saying which."""
        sdk = self._sdk
        try:
            self._complete(Request(ENDPOINT_CHECK_SYSTEM, "", ENDPOINT_CHECK_USER), timeout_s,
                           max_tokens=ENDPOINT_CHECK_TOKENS, think=False)
        except sdk.APIStatusError as err:
            if _is_transient(err.status_code):
                return (f"{self.name}: {self.base_url} answered HTTP {err.status_code} to a first check "
                        f"({err.message}); going on, the loop retries within the budget")
            raise AgentError(self._explain(err)) from err
        except sdk.APIConnectionError as err:
            raise AgentError(f"{self.name}: cannot reach {self.base_url} ({_cause(err)}); check --base-url "
                             f"(or {self._base_url_env}) and that the server is up") from err
        except sdk.APIError as err:
            raise AgentError(f"{self.name}: {self.base_url} answered a first check with an error: {err}") from err
        if self.reasoning and not self.takes_reasoning():
            return (f"{self.name}: --reasoning {self.reasoning} is not sent: AutoKernel does not know {self.model!r} "
                    f"to take a reasoning setting")
        return None

    def propose(self, ctx: AgentContext) -> Proposal:
        """Ask once; a reply that cannot be read is sent back with the reason and asked for again, once."""
        messages = prompt.build_messages(ctx)
        request = Request(messages.system, messages.job, messages.turn)
        answer = self._complete_with_retries(request, ctx.deadline)
        used = answer.usage
        try:
            candidates, notes = self._read(answer, ctx)
        except reply.ReplyError as first_error:
            log.warning("%s: %s; asking again once, with the reason", self.name, first_error)
            again = replace(request, followups=((answer.text, REASK.format(error=first_error)),))
            try:
                answer = self._complete_with_retries(again, ctx.deadline)
            except OutOfTime:
                raise self._malformed(f"{first_error}; no time left to ask again", used) from None
            used = used + answer.usage
            try:
                candidates, notes = self._read(answer, ctx)
            except reply.ReplyError as err:
                raise self._malformed(f"{err} (asked again once, after: {first_error})", used) from None
        cost = cost_usd(self.model, self._prices, used)
        log.info("%s: %s, %s", self.name, used.describe(), "cost unknown" if cost is None else f"${cost:.4f}")
        first, *rest = [Proposal(c.description, c.source, hypothesis=c.hypothesis, fix_of=c.fix_of)
                        for c in candidates]
        first.tokens_in, first.tokens_out, first.cost_usd = used.input, used.output, cost
        first.tokens_cached, first.tokens_reasoning = used.cached, used.reasoning
        first.queued, first.note = rest, "; ".join(notes)
        return first

    def _read(self, answer: ChatReply, ctx: AgentContext) -> tuple[list[reply.Candidate], list[str]]:
        return reply.parse(answer.text, current=ctx.kernel_source, failure=ctx.failure, truncated=answer.truncated,
                           limit=max(1, ctx.max_candidates))

    def _malformed(self, message: str, used: Usage) -> MalformedReply:
        return MalformedReply(f"{self.name}: {message}", tokens_in=used.input, tokens_out=used.output,
                              cost_usd=cost_usd(self.model, self._prices, used), tokens_cached=used.cached,
                              tokens_reasoning=used.reasoning)

    def _time_left(self, deadline: float | None) -> float:
        return float("inf") if deadline is None else deadline - self.retry.clock()

    def _complete_with_retries(self, request: Request, deadline: float | None = None) -> ChatReply:
        sdk = self._sdk
        for retry_number in range(self.retry.max_retries + 1):
            left = self._time_left(deadline)
            if left < MIN_CALL_S:
                raise OutOfTime(f"{self.name}: {max(left, 0):.0f} s of the budget left, too little for a reply")
            try:
                return self._complete(request, min(self.timeout_s, left))
            except sdk.APIStatusError as err:
                if not _is_transient(err.status_code):
                    raise AgentError(self._explain(err)) from err
                failure, wait = f"HTTP {err.status_code}: {err.message}", retry_after_s(err.response.headers)
            except sdk.APIConnectionError as err:
                failure, wait = f"connection failed: {err}", None
            except sdk.APIError as err:
                raise AgentError(f"{self.name}: unexpected API error: {err}") from err
            if retry_number == self.retry.max_retries:
                break
            wait = self.retry.backoff_s(retry_number) if wait is None else wait
            if wait + MIN_CALL_S > self._time_left(deadline):
                raise OutOfTime(f"{self.name}: {failure}; waiting {wait:.0f} s to retry would end past the budget "
                                f"({max(self._time_left(deadline), 0):.0f} s left)")
            log.warning("%s: %s; retry %d of %d in %.1f s", self.name, failure, retry_number + 1,
                        self.retry.max_retries, wait)
            self.retry.sleep(wait)
        raise AgentError(f"{self.name}: gave up after {self.retry.max_retries} retries at {self.base_url}; "
                         f"last error: {failure}")

    def _explain(self, err) -> str:
        status = err.status_code
        where = f"{self.name} at {self.base_url}"
        if status == 401:
            return f"{where}: the API rejected the key (HTTP 401): {err.message}. Check {self._key_env}."
        if status == 403:
            return f"{where}: the key may not use this API or model (HTTP 403): {err.message}"
        if status == 404:
            return (f"{where}: model {self.model!r} not found (HTTP 404): {err.message}. Pick another with "
                    f"--llm-model, or check --base-url (an OpenAI-compatible server's usually ends in /v1).")
        return f"{where}: the API refused the request (HTTP {status}): {err.message}"


def _cause(err: Exception) -> str:
    """The innermost reason of a connection error ("Connection refused"), not the SDK's generic wrapper."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


def _is_transient(status: int) -> bool:
    # 408 timeout, 409 conflict, 429 rate limit and 5xx (529 overloaded included) pass if you wait.
    return status in (408, 409, 429) or status >= 500
