"""Tests for autokernel/agents/openai_agent.py: the Chat Completions request it sends and what it reads back."""

import pytest

from autokernel.agents.base import AgentContext, AgentError
from autokernel.agents.openai_agent import DEFAULT_MAX_TOKENS, DEFAULT_MODEL, LOCAL_SERVER_KEY, OpenAIAgent

KERNEL = 'KERNEL_TYPE = "reduce"\n\ndef kernel_fn(x, dim=-1, op="sum"):\n    return x\n'
CONTEXT = AgentContext(kernel_type="reduce", kernel_source=KERNEL, last_result=None, history=[], best_versions=[],
                       program="PLAYBOOK FOR GPT", job={"rank": 1, "kernel_type": "reduce", "dtype": "float32",
                                                        "shapes": [{"M": 4, "N": 64}], "gpu": "A100"})


def test_sends_system_and_user_messages(server):
    server.add_kernel_reply("tree reduction per row", KERNEL, tokens_in=900, tokens_out=90)
    agent = OpenAIAgent(base_url=server.openai_base_url, api_key="sk-test")
    proposal = agent.propose(CONTEXT)
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == DEFAULT_MODEL
    system, user = request.body["messages"]
    assert system["role"] == "system" and "PLAYBOOK FOR GPT" in system["content"]
    assert user["role"] == "user" and KERNEL.rstrip() in user["content"]
    assert user["content"].startswith("## The job"), "the job's facts open the user message: a stable prefix"
    assert "max_completion_tokens" not in request.body, "a local server picks its own limit"
    assert "reasoning_effort" not in request.body
    assert (proposal.description, proposal.tokens_in, proposal.tokens_out) == ("tree reduction per row", 900, 90)


def test_local_server_without_a_key_gets_a_placeholder(server):
    server.add_kernel_reply("local model", KERNEL)
    OpenAIAgent("qwen3-coder", base_url=server.openai_base_url).propose(CONTEXT)
    assert server.requests[0].headers["authorization"] == f"Bearer {LOCAL_SERVER_KEY}"


def test_base_url_from_the_environment_and_an_explicit_token_limit(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)     # a server whose routes have no /v1 prefix
    server.add_kernel_reply("limited", KERNEL)
    OpenAIAgent(max_tokens=2048).propose(CONTEXT)
    assert server.requests[0].path == "/chat/completions"
    assert server.requests[0].body["max_completion_tokens"] == 2048


def test_official_api_gets_a_default_token_limit(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIAgent(api_key="sk-test").max_tokens == DEFAULT_MAX_TOKENS


def test_missing_key_without_a_base_url_is_an_agent_error(server):
    with pytest.raises(AgentError, match="set OPENAI_API_KEY"):
        OpenAIAgent()


@pytest.mark.parametrize("model, sent", [("gpt-6.1-sol", True), ("o4-mini", True), ("gpt-4.1", False)])
def test_reasoning_effort_goes_to_reasoning_models(server, model, sent):
    server.add_kernel_reply("thought about it", KERNEL)
    agent = OpenAIAgent(model, base_url=server.openai_base_url, reasoning="high")
    agent.propose(CONTEXT)
    assert server.requests[0].body.get("reasoning_effort") == ("high" if sent else None)
    warning = agent.check_endpoint()
    assert (warning is None) == sent and (sent or "--reasoning high is not sent" in warning)
    assert "reasoning_effort" not in server.checks[0].body


def test_cached_and_reasoning_tokens_are_read_and_priced(server):
    server.add_kernel_reply("cached", KERNEL, tokens_in=10_000, tokens_cached=8_000, tokens_out=3_000,
                            tokens_reasoning=2_500)
    proposal = OpenAIAgent("gpt-5", base_url=server.openai_base_url).propose(CONTEXT)
    assert (proposal.tokens_in, proposal.tokens_cached, proposal.tokens_out, proposal.tokens_reasoning) == (
        10_000, 8_000, 3_000, 2_500)
    # gpt-5: $1.25/M input, $0.125/M cached input, $10/M output (reasoning billed as output).
    assert proposal.cost_usd == pytest.approx((2_000 * 1.25 + 8_000 * 0.125 + 3_000 * 10) / 1e6)
