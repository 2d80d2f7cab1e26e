"""The agent interface the loop talks to, and the call-retry-parse flow the LLM agents share.

The loop builds an AgentContext, calls `agent.propose(ctx)` and gets back a Proposal (a complete new
kernel.py and a one-line description). An agent signals trouble with four exceptions: a reply it
could not parse (MalformedReply: the loop logs it and asks again), an unrecoverable setup problem
(AgentError: the loop stops), nothing left to try on this kernel (SearchExhausted: the loop moves
on to the next kernel), or no reply before the context's deadline (OutOfTime: the run's budget is
spent; the loop ends cleanly). With several GPUs the loop asks while other candidates are being
judged (ctx.in_flight names them), tells an agent that has `judged(job, source, result)` each
verdict, and waits when the agent raises WaitForResults. There it asks an agent that is not
`instant` on a thread of its own, one question per job (autokernel/proposals.py): two jobs'
questions may overlap, so such an agent must be safe to share between threads. The LLM agents
are: they keep nothing between calls but their SDK client (autokernel/proposals.py says why).

The budget binds the LLM agents: every call's timeout is the time left to the deadline, and a retry
or a Retry-After wait that would end past it is not made. Before a run, `check_endpoint()` makes one
tiny call, so a wrong URL, key or model fails within seconds, with the URL in the message.
"""

from __future__ import annotations

import email.utils
import logging
import random
import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Protocol

from autokernel.agents import prompt

log = logging.getLogger(__name__)

AGENT_KINDS = ("auto", "anthropic", "openai", "builtin")
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
    last_result: dict | None                    # bench.py JSON of the previous experiment; None at start
    history: list[dict]                         # recent experiments: experiment, description, status,
                                                # correctness, throughput, speedup_vs_pytorch, message
    best_versions: list[tuple[str, dict]]       # up to 3 best kept (source, bench result), best first
    program: str                                # program.md text
    job: dict                                   # contracts.Job.to_json(), and "baseline": its measured result
    deadline: float | None = None               # time.monotonic() by which a proposal must be back
    in_flight: list[str] | None = None          # with several GPUs: the candidates being judged now (descriptions)


@dataclass
class Proposal:
    description: str                            # one line: the commit message is "exp N: <description>"
    kernel_source: str                          # the complete new kernel.py
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None


class MalformedReply(Exception):
    """The reply had no parsable description or kernel; it still cost tokens, which the loop logs."""

    def __init__(self, message: str, *, tokens_in: int = 0, tokens_out: int = 0, cost_usd: float | None = None):
        super().__init__(message)
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.cost_usd = cost_usd


class AgentError(Exception):
    """Unrecoverable (bad key, unknown model, API down past every retry): the loop stops with this message."""


class SearchExhausted(Exception):
    """The agent has nothing left to try on this kernel."""


class WaitForResults(Exception):
    """With several GPUs: nothing new worth proposing until a candidate being judged comes back."""


class OutOfTime(Exception):
    """No reply can come before the deadline (the run's budget); nothing was proposed."""


class Agent(Protocol):
    name: str
    kind: str                   # "anthropic", "openai" or "builtin"
    model: str | None
    base_url: str | None
    instant: bool               # replies at once, with no network call: asked on the loop's own thread

    def propose(self, ctx: AgentContext) -> Proposal: ...

    def check_endpoint(self) -> str | None:
        """Fail (AgentError) when the agent cannot work at all; a warning to show, or None."""


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


Prices = dict[str, tuple[float, float]]   # model -> (USD per million input tokens, per million output tokens)


def cost_usd(model: str, prices: Prices, tokens_in: int, tokens_out: int) -> float | None:
    """What a call cost, or None for a model missing from the price table (local servers, new models)."""
    # Dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4.1-2025-04-14") cost what their alias costs.
    price = prices.get(model) or prices.get(re.sub(r"-(\d{8}|\d{4}-\d{2}-\d{2})$", "", model))
    if price is None:
        return None
    return (tokens_in * price[0] + tokens_out * price[1]) / 1e6


@dataclass
class ChatReply:
    text: str
    truncated: bool            # the API stopped at its token limit
    tokens_in: int
    tokens_out: int


class ChatAgent(ABC):
    """An LLM agent: prompt, one chat call with our retry policy, parse. Subclasses wrap one SDK.

    Both SDKs share their error classes' names and meaning, so the retry policy is written once
    against whichever SDK module the subclass passes in; the SDK clients' own retries are off.
    """

    instant = False             # a reply takes seconds: with several GPUs, asked on a thread of its own

    def __init__(self, *, vendor: str, sdk: ModuleType, model: str, prices: Prices, key_env: str,
                 base_url_env: str, retry: RetryPolicy | None, timeout_s: float):
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
    def _complete(self, system: str, user: str, timeout_s: float, *, max_tokens: int | None = None) -> ChatReply:
        """One API call, no retries; `max_tokens` overrides the agent's own limit."""

    def has_prices(self) -> bool:
        return cost_usd(self.model, self._prices, 1, 1) is not None

    def check_endpoint(self, timeout_s: float = ENDPOINT_CHECK_TIMEOUT_S) -> str | None:
        """One tiny call: the URL answers, the key is accepted and the model exists, or AgentError saying which."""
        sdk = self._sdk
        try:
            self._complete(ENDPOINT_CHECK_SYSTEM, ENDPOINT_CHECK_USER, timeout_s, max_tokens=ENDPOINT_CHECK_TOKENS)
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
        return None

    def propose(self, ctx: AgentContext) -> Proposal:
        system, user = prompt.build_messages(ctx)
        reply = self._complete_with_retries(system, user, ctx.deadline)
        cost = cost_usd(self.model, self._prices, reply.tokens_in, reply.tokens_out)
        log.info("%s: %d tokens in, %d out, %s", self.name, reply.tokens_in, reply.tokens_out,
                 "cost unknown" if cost is None else f"${cost:.4f}")
        try:
            description, source = prompt.parse_reply(reply.text, truncated=reply.truncated)
        except ValueError as err:
            raise MalformedReply(f"{self.name}: {err}", tokens_in=reply.tokens_in, tokens_out=reply.tokens_out,
                                 cost_usd=cost) from None
        return Proposal(description, source, reply.tokens_in, reply.tokens_out, cost)

    def _time_left(self, deadline: float | None) -> float:
        return float("inf") if deadline is None else deadline - self.retry.clock()

    def _complete_with_retries(self, system: str, user: str, deadline: float | None = None) -> ChatReply:
        sdk = self._sdk
        for retry_number in range(self.retry.max_retries + 1):
            left = self._time_left(deadline)
            if left < MIN_CALL_S:
                raise OutOfTime(f"{self.name}: {max(left, 0):.0f} s of the budget left, too little for a reply")
            try:
                return self._complete(system, user, min(self.timeout_s, left))
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
