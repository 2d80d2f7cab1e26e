"""Tests for autokernel/agents/anthropic_agent.py: the Messages API request it sends and what it reads back."""

import pytest

from autokernel.agents.anthropic_agent import (DEFAULT_MAX_TOKENS, DEFAULT_MODEL, THINKING_BUDGETS, AnthropicAgent,
                                               thinking_kind)
from autokernel.agents.base import AgentContext, AgentError

KERNEL = 'KERNEL_TYPE = "rmsnorm"\n\ndef kernel_fn(x, weight, eps=1e-6):\n    return x\n'
CONTEXT = AgentContext(kernel_type="rmsnorm", kernel_source=KERNEL, last_result=None, history=[], best_versions=[],
                       program="PLAYBOOK FOR CLAUDE", job={"rank": 3, "kernel_type": "rmsnorm", "dtype": "bfloat16",
                                                           "shapes": [{"M": 4, "N": 64}], "gpu": "H100"})


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
    (system,) = request.body["system"]
    assert "PLAYBOOK FOR CLAUDE" in system["text"] and system["cache_control"] == {"type": "ephemeral"}
    (message,) = request.body["messages"]
    job, turn = message["content"]
    assert message["role"] == "user" and KERNEL.rstrip() in turn["text"] and "cache_control" not in turn
    assert "## The job" in job["text"] and job["cache_control"] == {"type": "ephemeral"}, \
        "the job's facts end the cached prefix"
    assert "thinking" not in request.body and "output_config" not in request.body, "no --reasoning, no setting"
    assert (proposal.tokens_in, proposal.tokens_out) == (1234, 321)
    assert agent.name == f"anthropic:{DEFAULT_MODEL}"


@pytest.mark.parametrize("model, expected", [
    ("claude-sonnet-5-5", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}),
    ("claude-opus-4-6", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}),
    ("claude-haiku-4-5", {"thinking": {"type": "enabled", "budget_tokens": THINKING_BUDGETS["medium"]}}),
    ("claude-3-5-haiku-latest", {}),
])
def test_reasoning_is_sent_as_each_model_takes_it(server, model, expected):
    server.add_kernel_reply("one pass", KERNEL)
    agent = AnthropicAgent(model, base_url=server.anthropic_base_url, api_key="k", reasoning="medium")
    agent.propose(CONTEXT)
    body = server.requests[0].body
    assert {key: body[key] for key in ("thinking", "output_config") if key in body} == expected
    assert (agent.check_endpoint() is None) == bool(expected), "a model that takes none is named at the check"
    assert "thinking" not in server.checks[0].body, "the tiny check call sends no thinking budget"


def test_thinking_kinds():
    assert [thinking_kind(m) for m in ("claude-fable-5-1", "claude-opus-4-1", "claude-sonnet-4-20250514",
                                       "claude-3-7-sonnet-20250219", "claude-internal-test")] == [
        "adaptive", "budget", "budget", "budget", None]


def test_cached_and_thinking_tokens_are_read_and_priced(server):
    # 10,000 tokens in: 6,000 read from the cache, 1,000 written to it; 2,000 out, 1,500 of them thinking.
    server.add_kernel_reply("cached", KERNEL, tokens_in=10_000, tokens_cached=6_000, tokens_cache_write=1_000,
                            tokens_out=2_000, tokens_reasoning=1_500)
    proposal = AnthropicAgent("claude-sonnet-5-5", base_url=server.anthropic_base_url, api_key="k").propose(CONTEXT)
    assert (proposal.tokens_in, proposal.tokens_cached, proposal.tokens_out, proposal.tokens_reasoning) == (
        10_000, 6_000, 2_000, 1_500)
    # $2/M input: 3,000 uncached, 6,000 read at a tenth, 1,000 written at 1.25x; $10/M output.
    assert proposal.cost_usd == pytest.approx((3_000 * 2 + 6_000 * 0.2 + 1_000 * 2.5 + 2_000 * 10) / 1e6)


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
