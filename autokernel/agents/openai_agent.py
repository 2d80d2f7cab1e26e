"""The OpenAI agent: asks a model through Chat Completions (`openai` SDK) for the next kernel.py.

With a base URL it talks to any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio);
those usually need no key, so a placeholder is sent when OPENAI_API_KEY is unset.

OpenAI caches a prompt's repeated prefix by itself: the system message (the job's playbook) and the
user message's first part (the job's facts) are the same on every call of a job, so only the rest is
new. With --reasoning, reasoning models (the o-series, GPT-5 and later) get `reasoning_effort`.
"""

from __future__ import annotations

import os

from autokernel.agents.base import AgentError, ChatAgent, ChatReply, Request, RetryPolicy
from autokernel.agents.usage import Price, Prices, Usage

DEFAULT_MODEL = "gpt-6.1-sol"
KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
LOCAL_SERVER_KEY = "no-key-needed"
# Reasoning models spend part of this on hidden reasoning, so it is roomier than a kernel file needs.
DEFAULT_MAX_TOKENS = 32000
DEFAULT_TIMEOUT_S = 900.0

# USD per million tokens: input, output, cached input (OpenAI bills no cache writes beyond the input price).
PRICES: Prices = {name: Price(i, o, cached, i) for name, (i, o, cached) in {
    "gpt-6.1-sol": (2.0, 10.0, 0.2),
    "gpt-6-sol": (2.0, 10.0, 0.2),
    "gpt-5": (1.25, 10.0, 0.125),
    "gpt-5-mini": (0.25, 2.0, 0.025),
    "gpt-4.1": (2.0, 8.0, 0.5),
    "gpt-4.1-mini": (0.4, 1.6, 0.1),
    "gpt-4o": (2.5, 10.0, 1.25),
    "gpt-4o-mini": (0.15, 0.6, 0.075),
    "o3": (2.0, 8.0, 0.5),
    "o4-mini": (1.1, 4.4, 0.275),
}.items()}
REASONING_MODELS = ("o1", "o3", "o4", "gpt-5", "gpt-6")     # name prefixes of models that take reasoning_effort


class OpenAIAgent(ChatAgent):
    """`max_tokens` defaults to a limit on OpenAI's own API and to none on other servers, whose
    context windows vary and which reject a limit larger than what is left of the context."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None, reasoning: str | None = None):
        try:
            import openai
        except ImportError:
            raise AgentError("the openai agent needs the `openai` package: pip install openai") from None
        base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        api_key = api_key or os.environ.get(KEY_ENV) or (LOCAL_SERVER_KEY if base_url else None)
        if not api_key:
            raise AgentError(f"the openai agent needs an API key: set {KEY_ENV} "
                             "(or pass a base URL for a local OpenAI-compatible server)")
        super().__init__(vendor="openai", sdk=openai, model=model or DEFAULT_MODEL, prices=PRICES,
                         key_env=KEY_ENV, base_url_env=BASE_URL_ENV, retry=retry, timeout_s=timeout_s,
                         reasoning=reasoning)
        self.max_tokens = max_tokens if max_tokens is not None or base_url else DEFAULT_MAX_TOKENS
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s)
        self.base_url = str(self._client.base_url)

    def takes_reasoning(self) -> bool:
        return self.model.startswith(REASONING_MODELS)

    def _complete(self, request: Request, timeout_s: float, *, max_tokens: int | None = None,
                  think: bool = True) -> ChatReply:
        limit = max_tokens or self.max_tokens
        options = {} if limit is None else {"max_completion_tokens": limit}
        if think and self.reasoning and self.takes_reasoning():
            options["reasoning_effort"] = self.reasoning
        user = f"{request.job}\n\n{request.turn}" if request.job else request.turn
        messages = [{"role": "system", "content": request.system}, {"role": "user", "content": user}]
        for assistant, followup in request.followups:
            messages += [{"role": "assistant", "content": assistant}, {"role": "user", "content": followup}]
        completion = self._client.chat.completions.create(model=self.model, messages=messages, timeout=timeout_s,
                                                          **options)
        choice = completion.choices[0] if completion.choices else None
        return ChatReply(text=(choice and choice.message.content) or "",
                         truncated=choice is not None and choice.finish_reason == "length",
                         usage=_usage(completion.usage))


def _usage(usage) -> Usage:
    """The completion's usage (some compatible servers leave it, or its details, out)."""
    if usage is None:
        return Usage()
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return Usage(input=usage.prompt_tokens or 0, output=usage.completion_tokens or 0,
                 cached=getattr(prompt_details, "cached_tokens", None) or 0,
                 reasoning=getattr(completion_details, "reasoning_tokens", None) or 0)
