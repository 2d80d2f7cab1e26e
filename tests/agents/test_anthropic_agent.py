"""Tests for autokernel/agents/anthropic_agent.py: the Messages API request it sends and what it reads back."""

import pytest

from autokernel.agents import AgentContext, AgentError
from autokernel.agents.anthropic_agent import DEFAULT_MAX_TOKENS, DEFAULT_MODEL, AnthropicAgent

KERNEL = 'KERNEL_TYPE = "rmsnorm"\n\ndef kernel_fn(x, weight, eps=1e-6):\n    return x\n'
CONTEXT = AgentContext(kernel_type="rmsnorm", kernel_source=KERNEL, last_result=None, history=[], best_versions=[],
                       program="PLAYBOOK FOR CLAUDE", job={"rank": 3, "kernel_type": "rmsnorm", "dtype": "bfloat16",
                                                           "shapes": [{"M": 4, "N": 64}], "gpu": "H100", "baseline": None})


def sent_key(request) -> str | None:
    """The API key a request carried: SDK versions send it as x-api-key or as a bearer token."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    return request.headers.get("x-api-key") or bearer or None


def test_sends_one_messages_request_with_the_playbook_as_system(server):
    server.add_kernel_reply("one pass over the row", KERNEL, tokens_in=1234, tokens_out=321)
    agent = AnthropicAgent(base_url=server.anthropic_base_url, api_key="sk-ant-test")
    proposal = agent.propose(CONTEXT)
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert sent_key(request) == "sk-ant-test"
    assert request.body["model"] == DEFAULT_MODEL and request.body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert "PLAYBOOK FOR CLAUDE" in request.body["system"]
    (message,) = request.body["messages"]
    assert message["role"] == "user" and KERNEL.rstrip() in message["content"]
    assert (proposal.tokens_in, proposal.tokens_out) == (1234, 321)
    assert agent.name == f"anthropic:{DEFAULT_MODEL}"


def test_key_and_base_url_come_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    server.add_kernel_reply("from the environment", KERNEL)
    assert AnthropicAgent("claude-opus-5-5", max_tokens=1000).propose(CONTEXT).description == "from the environment"
    assert sent_key(server.requests[0]) == "sk-ant-from-env"
    assert server.requests[0].body["model"] == "claude-opus-5-5" and server.requests[0].body["max_tokens"] == 1000


def test_unknown_model_has_no_cost(server):
    server.add_kernel_reply("anything", KERNEL)
    agent = AnthropicAgent("claude-internal-test", base_url=server.anthropic_base_url, api_key="k")
    assert agent.propose(CONTEXT).cost_usd is None


def test_missing_key_is_an_agent_error(server):
    with pytest.raises(AgentError, match="set ANTHROPIC_API_KEY"):
        AnthropicAgent(base_url=server.anthropic_base_url)
