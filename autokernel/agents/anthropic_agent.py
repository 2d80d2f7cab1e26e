"""The Anthropic agent: asks a Claude model (Messages API, `anthropic` SDK) for the next kernel.py."""

from __future__ import annotations

import os

from autokernel.agents.base import AgentError, ChatAgent, ChatReply, Prices, RetryPolicy

DEFAULT_MODEL = "claude-sonnet-5-5"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
# A whole kernel file and its reasoning (adaptive thinking counts against it) fit inside this;
# the Messages API requires a limit.
DEFAULT_MAX_TOKENS = 32000
DEFAULT_TIMEOUT_S = 900.0

PRICES: Prices = {
    "claude-fable-5-1": (10.0, 50.0),
    "claude-opus-5-5": (4.0, 20.0),
    "claude-sonnet-5-5": (2.0, 10.0),
    "claude-opus-5": (5.0, 25.0),
    "claude-sonnet-5": (2.0, 10.0),
    "claude-opus-4-6": (5.0, 25.0),
    "claude-sonnet-4-6": (3.0, 15.0),
    "claude-opus-4-5": (5.0, 25.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
}


class AnthropicAgent(ChatAgent):
    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry: RetryPolicy | None = None):
        try:
            import anthropic
        except ImportError:
            raise AgentError("the anthropic agent needs the `anthropic` package: pip install anthropic") from None
        api_key = api_key or os.environ.get(KEY_ENV)
        if not api_key:
            raise AgentError(f"the anthropic agent needs an API key: set {KEY_ENV}")
        super().__init__(vendor="anthropic", sdk=anthropic, model=model or DEFAULT_MODEL, prices=PRICES,
                         key_env=KEY_ENV, base_url_env=BASE_URL_ENV, retry=retry, timeout_s=timeout_s)
        self.max_tokens = max_tokens
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url or os.environ.get(BASE_URL_ENV) or None,
                                           max_retries=0, timeout=timeout_s)
        self.base_url = str(self._client.base_url)

    def _complete(self, system: str, user: str, timeout_s: float, *, max_tokens: int | None = None) -> ChatReply:
        message = self._client.messages.create(model=self.model, max_tokens=max_tokens or self.max_tokens,
                                               system=system, messages=[{"role": "user", "content": user}],
                                               timeout=timeout_s)
        text = "".join(block.text for block in message.content if block.type == "text")
        return ChatReply(text=text, truncated=message.stop_reason == "max_tokens",
                         tokens_in=message.usage.input_tokens, tokens_out=message.usage.output_tokens)
