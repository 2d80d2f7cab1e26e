"""The Anthropic agent: asks a Claude model (Messages API, `anthropic` SDK) for the next kernel.py.

The request marks its stable prefix for the prompt cache: the system message (the job's playbook) and
the user message's first part (the job's facts) each end in a cache_control breakpoint, so every call
of a job after the first reads them from the cache. With --reasoning, models that think adaptively
(Claude 4.6 and later, the Claude 5 family) get adaptive thinking at that effort; earlier thinking
models (Claude 3.7 Sonnet to 4.5) a thinking budget; others nothing (the endpoint check says so).
"""

from __future__ import annotations

import os
import re

from autokernel.agents.base import AgentError, ChatAgent, ChatReply, Request, RetryPolicy
from autokernel.agents.usage import Price, Prices, Usage

DEFAULT_MODEL = "claude-sonnet-5-5"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
# A whole kernel file and its reasoning (adaptive thinking counts against it) fit inside this;
# the Messages API requires a limit.
DEFAULT_MAX_TOKENS = 32000
DEFAULT_TIMEOUT_S = 900.0
# Thinking budgets for the models that take one (it must stay below max_tokens, and at least 1024).
THINKING_BUDGETS = {"low": 4096, "medium": 12288, "high": 24576}
MIN_THINKING_BUDGET = 1024
CACHE = {"type": "ephemeral"}
# Anthropic bills prompt-cache reads at a tenth of the input price and 5-minute cache writes at 1.25 times it.
CACHE_READ_FACTOR, CACHE_WRITE_FACTOR = 0.1, 1.25


def _claude(input_price: float, output_price: float) -> Price:
    return Price(input_price, output_price, input_price * CACHE_READ_FACTOR, input_price * CACHE_WRITE_FACTOR)


PRICES: Prices = {
    "claude-fable-5-1": _claude(10.0, 50.0),
    "claude-opus-5-5": _claude(4.0, 20.0),
    "claude-sonnet-5-5": _claude(2.0, 10.0),
    "claude-opus-5": _claude(5.0, 25.0),
    "claude-sonnet-5": _claude(2.0, 10.0),
    "claude-opus-4-6": _claude(5.0, 25.0),
    "claude-sonnet-4-6": _claude(3.0, 15.0),
    "claude-opus-4-5": _claude(5.0, 25.0),
    "claude-sonnet-4-5": _claude(3.0, 15.0),
    "claude-haiku-4-5": _claude(1.0, 5.0),
    "claude-opus-4-1": _claude(15.0, 75.0),
    "claude-sonnet-4": _claude(3.0, 15.0),
}
_VERSIONED = re.compile(r"^claude-(opus|sonnet|haiku|fable|mythos)(?:-(\d+))?(?:-(\d)(?!\d))?")


def thinking_kind(model: str) -> str | None:
    """"adaptive", "budget" or None: how this model takes a thinking setting, if it does."""
    if model.startswith("claude-3-7-sonnet"):
        return "budget"
    match = _VERSIONED.match(model)
    if match is None:
        return None
    family, major, minor = match.group(1), int(match.group(2) or 0), int(match.group(3) or 0)
    if family in ("fable", "mythos") or (major, minor) >= (4, 6):
        return "adaptive"
    return "budget" if major >= 4 else None


class AnthropicAgent(ChatAgent):
    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None, reasoning: str | None = None):
        try:
            import anthropic
        except ImportError:
            raise AgentError("the anthropic agent needs the `anthropic` package: pip install anthropic") from None
        api_key = api_key or os.environ.get(KEY_ENV)
        if not api_key:
            raise AgentError(f"the anthropic agent needs an API key: set {KEY_ENV}")
        super().__init__(vendor="anthropic", sdk=anthropic, model=model or DEFAULT_MODEL, prices=PRICES,
                         key_env=KEY_ENV, base_url_env=BASE_URL_ENV, retry=retry, timeout_s=timeout_s,
                         reasoning=reasoning)
        self.max_tokens = max_tokens
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url or os.environ.get(BASE_URL_ENV) or None,
                                           max_retries=0, timeout=timeout_s)
        self.base_url = str(self._client.base_url)

    def takes_reasoning(self) -> bool:
        return thinking_kind(self.model) is not None

    def _thinking(self, max_tokens: int) -> dict:
        """The request's thinking setting for --reasoning (none without it, or for a model that takes none)."""
        kind = thinking_kind(self.model) if self.reasoning else None
        if kind == "adaptive":
            return {"thinking": {"type": "adaptive"}, "output_config": {"effort": self.reasoning}}
        if kind == "budget":
            budget = min(THINKING_BUDGETS[self.reasoning], max_tokens - MIN_THINKING_BUDGET)
            if budget >= MIN_THINKING_BUDGET:
                return {"thinking": {"type": "enabled", "budget_tokens": budget}}
        return {}

    def _complete(self, request: Request, timeout_s: float, *, max_tokens: int | None = None,
                  think: bool = True) -> ChatReply:
        limit = max_tokens or self.max_tokens
        if request.job:     # a proposal: its stable prefix is marked for the prompt cache
            system = [{"type": "text", "text": request.system, "cache_control": CACHE}]
            first = [{"type": "text", "text": request.job, "cache_control": CACHE},
                     {"type": "text", "text": request.turn}]
        else:
            system, first = request.system, request.turn
        messages = [{"role": "user", "content": first}]
        for assistant, user in request.followups:
            messages += [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]
        message = self._client.messages.create(model=self.model, max_tokens=limit, system=system, messages=messages,
                                               timeout=timeout_s, **(self._thinking(limit) if think else {}))
        text = "".join(block.text for block in message.content if block.type == "text")
        usage = message.usage
        written = usage.cache_creation_input_tokens or 0
        read = usage.cache_read_input_tokens or 0
        details = getattr(usage, "output_tokens_details", None)
        return ChatReply(text=text, truncated=message.stop_reason == "max_tokens",
                         usage=Usage(input=usage.input_tokens + written + read, output=usage.output_tokens,
                                     cached=read, cache_write=written,
                                     reasoning=getattr(details, "thinking_tokens", None) or 0))
