"""The OpenAI agent: asks a model through Chat Completions (`openai` SDK) for the next kernel.py.

With a base URL it talks to any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio);
those usually need no key, so a placeholder is sent when OPENAI_API_KEY is unset.
"""

from __future__ import annotations

import os

from autokernel.agents.base import AgentError, ChatAgent, ChatReply, Prices, RetryPolicy

DEFAULT_MODEL = "gpt-6.1-sol"
KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
LOCAL_SERVER_KEY = "no-key-needed"
# Reasoning models spend part of this on hidden reasoning, so it is roomier than a kernel file needs.
DEFAULT_MAX_TOKENS = 32000
DEFAULT_TIMEOUT_S = 900.0

PRICES: Prices = {
    "gpt-6.1-sol": (2.0, 10.0),
    "gpt-6-sol": (2.0, 10.0),
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "o3": (2.0, 8.0),
    "o4-mini": (1.1, 4.4),
}


class OpenAIAgent(ChatAgent):
    """`max_tokens` defaults to a limit on OpenAI's own API and to none on other servers, whose
    context windows vary and which reject a limit larger than what is left of the context."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None):
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
                         key_env=KEY_ENV, base_url_env=BASE_URL_ENV, retry=retry, timeout_s=timeout_s)
        self.max_tokens = max_tokens if max_tokens is not None or base_url else DEFAULT_MAX_TOKENS
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout_s)
        self.base_url = str(self._client.base_url)

    def _complete(self, system: str, user: str, timeout_s: float, *, max_tokens: int | None = None) -> ChatReply:
        limit = max_tokens or self.max_tokens
        limits = {} if limit is None else {"max_completion_tokens": limit}
        completion = self._client.chat.completions.create(
            model=self.model, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            timeout=timeout_s, **limits)
        choice = completion.choices[0] if completion.choices else None
        usage = completion.usage   # some compatible servers leave it out
        return ChatReply(text=(choice and choice.message.content) or "",
                         truncated=choice is not None and choice.finish_reason == "length",
                         tokens_in=usage.prompt_tokens if usage else 0,
                         tokens_out=usage.completion_tokens if usage else 0)
