"""Choosing the agent: the one the user named, or by which API key is set; the built-in search needs none.

Its own module, apart from base.py: the agents import base.py, and this imports the agents.
The SDKs (anthropic, openai) are imported only when an agent of theirs makes its client.
"""

from __future__ import annotations

import os

from autokernel.agents.anthropic_agent import AnthropicAgent
from autokernel.agents.base import Agent, AgentError
from autokernel.agents.builtin import BuiltinAgent
from autokernel.agents.openai_agent import OpenAIAgent
from autokernel.core import contracts


def make_agent(kind: str | None, *, model: str | None = None, base_url: str | None = None,
               reasoning: str | None = None) -> Agent:
    """The agent of `kind` ("auto" or None picks by which API key is set; "builtin" needs none);
    reasoning: the LLM's reasoning or thinking level, "low", "medium" or "high" (None: the model's default)."""
    chosen = _resolve_kind(kind, base_url)
    if chosen == "anthropic":
        return AnthropicAgent(model, base_url=base_url, reasoning=reasoning)
    if chosen == "openai":
        return OpenAIAgent(model, base_url=base_url, reasoning=reasoning)
    given = [f"{flag} {value}" for flag, value in (("--llm-model", model), ("--base-url", base_url),
                                                     ("--reasoning", reasoning)) if value]
    if given:
        raise AgentError(f"{' and '.join(given)} given, but the built-in search agent uses no model, URL or reasoning "
                         f"level: drop {'them' if len(given) > 1 else 'it'} (or pass {given[0].split()[0]} \"\"), or set "
                         "ANTHROPIC_API_KEY or OPENAI_API_KEY, or choose the anthropic or openai agent")
    return BuiltinAgent()


def _resolve_kind(kind: str | None, base_url: str | None) -> str:
    kind = (kind or "auto").lower()
    if kind not in contracts.AGENT_KINDS:
        raise AgentError(f"unknown agent {kind!r}; choose one of: {', '.join(contracts.AGENT_KINDS)}")
    if kind != "auto":
        return kind
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    # A base URL without any key means a local OpenAI-compatible server (vLLM, Ollama).
    if os.environ.get("OPENAI_API_KEY") or base_url or os.environ.get("OPENAI_BASE_URL"):
        return "openai"
    return "builtin"
