"""Tests for autokernel/agents/base.py: choosing an agent, and the retry, parse and cost flow of both LLM agents.

The LLM agents run their real SDK clients against tests/fake_llm_server.py on 127.0.0.1.
"""

import random
import socket
import sys
import threading
import time
from email.utils import formatdate

import pytest

from autokernel.agents.anthropic_agent import AnthropicAgent
from autokernel.agents.base import AgentContext, AgentError, MalformedReply, OutOfTime, RetryPolicy, retry_after_s
from autokernel.agents.builtin import BuiltinAgent
from autokernel.agents.factory import make_agent
from autokernel.agents.openai_agent import OpenAIAgent
from autokernel.agents.usage import Price, Usage, cost_usd
from tests.fake_llm_server import FakeLLMServer

KERNEL = 'KERNEL_TYPE = "softmax"\n\ndef kernel_fn(x):\n    return x\n'
CONTEXT = AgentContext(kernel_type="softmax", kernel_source=KERNEL, last_result=None, history=[], best_versions=[],
                       program="PLAYBOOK", job={"rank": 1, "kernel_type": "softmax", "shapes": [{"M": 8, "N": 8}],
                                                "dtype": "float16", "gpu": "test GPU"})


class Sleeps(list):
    """An injected sleep that records the waits instead of waiting."""

    def __call__(self, seconds):
        self.append(seconds)


def llm_agent(kind: str, server: FakeLLMServer, sleeps: Sleeps, **options):
    retry = RetryPolicy(max_retries=options.pop("max_retries", 3), sleep=sleeps, rng=random.Random(0))
    if kind == "anthropic":
        return AnthropicAgent("claude-sonnet-5-5", base_url=server.anthropic_base_url, api_key="test-key",
                              retry=retry, **options)
    return OpenAIAgent("gpt-6.1-sol", base_url=server.openai_base_url, api_key="test-key", retry=retry, **options)


LLM_KINDS = pytest.mark.parametrize("kind", ["anthropic", "openai"])


# --------------------------------------------------------------------------- make_agent
def test_auto_without_keys_is_the_builtin_agent():
    assert isinstance(make_agent(None), BuiltinAgent)
    assert isinstance(make_agent("auto"), BuiltinAgent)


def test_auto_prefers_anthropic_then_openai(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert isinstance(make_agent(None), OpenAIAgent)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    agent = make_agent("auto", model="claude-haiku-4-5")
    assert isinstance(agent, AnthropicAgent) and agent.name == "anthropic:claude-haiku-4-5"


def test_auto_with_only_a_base_url_talks_to_a_local_server():
    agent = make_agent(None, model="qwen2.5-coder", base_url="http://127.0.0.1:9/v1")
    assert isinstance(agent, OpenAIAgent) and agent.name == "openai:qwen2.5-coder"


@pytest.mark.parametrize("kind, env_name", [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")])
def test_explicit_kind_without_its_key_names_the_variable(kind, env_name):
    with pytest.raises(AgentError, match=env_name):
        make_agent(kind)


@pytest.mark.parametrize("kind, options, complaint", [
    ("gemini", {}, "unknown agent 'gemini'"),
    ("builtin", {"model": "gpt-5"}, r"--llm-model gpt-5 given, but the built-in search agent uses no model, URL or "
                                    r"reasoning level: drop it \(or pass --llm-model \"\"\)"),
    ("builtin", {"base_url": "http://h:1/v1"}, r"^--base-url http://h:1/v1 given, but the built-in"),
    ("builtin", {"reasoning": "high"}, r"^--reasoning high given, but the built-in search agent"),
    (None, {"model": "gpt-5"}, "set ANTHROPIC_API_KEY or OPENAI_API_KEY"),
])
def test_bad_choices_are_explained(kind, options, complaint):
    with pytest.raises(AgentError, match=complaint):
        make_agent(kind, **options)


@pytest.mark.parametrize("agent_class, package", [(AnthropicAgent, "anthropic"), (OpenAIAgent, "openai")])
def test_missing_sdk_is_an_agent_error(monkeypatch, agent_class, package):
    monkeypatch.setitem(sys.modules, package, None)     # what a machine without the package sees
    with pytest.raises(AgentError, match=f"pip install {package}"):
        agent_class(api_key="k", base_url="http://127.0.0.1:9")


# --------------------------------------------------------------------------- retry policy, Retry-After, cost
def test_backoff_grows_exponentially_with_jitter_and_a_ceiling():
    policy = RetryPolicy(base_delay_s=2, max_delay_s=30, rng=random.Random(1))
    waits = [policy.backoff_s(n) for n in range(8)]
    for n, wait in enumerate(waits):
        ceiling = min(30, 2 * 2 ** n)
        assert ceiling / 2 <= wait <= ceiling
    assert len(set(waits)) == len(waits), "jitter spreads the waits"


def test_negative_retry_settings_are_rejected():
    with pytest.raises(ValueError, match="must not be negative"):
        RetryPolicy(max_retries=-1)


def test_retry_after_forms():
    assert retry_after_s({"retry-after": "7"}) == 7.0
    assert retry_after_s({"retry-after": "1.5", "retry-after-ms": "250"}) == 0.25
    assert 50 < retry_after_s({"retry-after": formatdate(time.time() + 60, usegmt=True)}) <= 61
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_cost_from_the_price_table():
    prices = {"model-a": Price(3.0, 15.0, 0.3, 3.75)}
    assert cost_usd("model-a", prices, Usage(1_000_000, 100_000)) == pytest.approx(4.5)
    assert cost_usd("model-a-20250929", prices, Usage(1_000_000, 0)) == pytest.approx(3.0)
    assert cost_usd("model-a", prices, Usage(1_000_000, 0, cached=500_000, cache_write=100_000)) == pytest.approx(
        (400_000 * 3.0 + 500_000 * 0.3 + 100_000 * 3.75) / 1e6)
    assert cost_usd("local-llama", prices, Usage(10, 10)) is None


# --------------------------------------------------------------------------- both LLM agents against the fake server
@LLM_KINDS
def test_good_reply_becomes_a_proposal_with_tokens_and_cost(kind, server):
    server.add_kernel_reply("fuse the scale into exp2", KERNEL, tokens_in=2000, tokens_out=500)
    proposal = llm_agent(kind, server, Sleeps()).propose(CONTEXT)
    assert (proposal.description, proposal.kernel_source) == ("fuse the scale into exp2", KERNEL)
    assert (proposal.tokens_in, proposal.tokens_out) == (2000, 500)
    assert proposal.cost_usd == pytest.approx(0.009)   # $2 / $10 per million tokens for both models


@LLM_KINDS
def test_a_malformed_reply_is_asked_again_once_with_its_error(kind, server):
    server.add_reply("I would try a bigger block.", tokens_in=300, tokens_out=20)
    server.add_kernel_reply("bigger block", KERNEL, tokens_in=400, tokens_out=30)
    proposal = llm_agent(kind, server, Sleeps()).propose(CONTEXT)
    assert proposal.description == "bigger block" and (proposal.tokens_in, proposal.tokens_out) == (700, 50)
    first, again = server.requests
    turns = again.body["messages"][-3:] if kind == "openai" else again.body["messages"]
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == "I would try a bigger block."
    assert "could not be used: no ```python code block" in turns[2]["content"]
    assert first.body["system"] == again.body["system"] if kind == "anthropic" else \
        first.body["messages"][:2] == again.body["messages"][:2], "the re-ask keeps the first request's prefix"


@LLM_KINDS
def test_a_reply_malformed_twice_raises_with_the_tokens_of_both(kind, server):
    server.add_reply("I would try a bigger block.", tokens_in=300, tokens_out=20)
    server.add_reply("Still no code, sorry.", tokens_in=350, tokens_out=10)
    with pytest.raises(MalformedReply, match="asked again once") as caught:
        llm_agent(kind, server, Sleeps()).propose(CONTEXT)
    assert (caught.value.tokens_in, caught.value.tokens_out) == (650, 30)
    assert caught.value.cost_usd > 0 and len(server.requests) == 2


@LLM_KINDS
def test_reply_cut_at_the_token_limit_is_malformed(kind, server):
    for _ in range(2):
        server.add_reply("DESCRIPTION: longer\n```python\n" + KERNEL, truncated=True)
    with pytest.raises(MalformedReply, match="token limit"):
        llm_agent(kind, server, Sleeps()).propose(CONTEXT)


@LLM_KINDS
def test_server_error_is_retried_after_a_backoff(kind, server):
    server.add_error(500)
    server.add_kernel_reply("second try", KERNEL)
    sleeps = Sleeps()
    assert llm_agent(kind, server, sleeps).propose(CONTEXT).description == "second try"
    assert len(server.requests) == 2
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] <= 2.0


@LLM_KINDS
def test_rate_limit_waits_as_long_as_retry_after_says(kind, server):
    server.add_error(429, retry_after="7")
    server.add_kernel_reply("after the rate limit", KERNEL)
    sleeps = Sleeps()
    assert llm_agent(kind, server, sleeps).propose(CONTEXT).description == "after the rate limit"
    assert sleeps == [7.0]


@LLM_KINDS
@pytest.mark.parametrize("status, complaint", [(401, "rejected the key"), (403, "may not use"),
                                               (404, "not found"), (400, "refused the request")])
def test_client_errors_stop_at_once(kind, server, status, complaint):
    server.add_error(status)
    server.add_kernel_reply("never reached", KERNEL)
    sleeps = Sleeps()
    with pytest.raises(AgentError, match=complaint):
        llm_agent(kind, server, sleeps).propose(CONTEXT)
    assert len(server.requests) == 1 and sleeps == [] and server.pending == 1


@LLM_KINDS
def test_unauthorized_names_the_key_variable(kind, server):
    server.add_error(401)
    with pytest.raises(AgentError, match={"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}[kind]):
        llm_agent(kind, server, Sleeps()).propose(CONTEXT)


@LLM_KINDS
def test_gives_up_after_the_configured_retries(kind, server):
    for _ in range(3):
        server.add_error(503)
    sleeps = Sleeps()
    with pytest.raises(AgentError, match="gave up after 2 retries at http://127.0.0.1:.*; last error: HTTP 503"):
        llm_agent(kind, server, sleeps, max_retries=2).propose(CONTEXT)
    assert len(server.requests) == 3 and len(sleeps) == 2 and sleeps[1] > sleeps[0] / 2


@LLM_KINDS
def test_connection_failures_are_retried(kind, server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    retry = RetryPolicy(max_retries=2, sleep=(sleeps := Sleeps()))
    agent_class, path = {"anthropic": (AnthropicAgent, ""), "openai": (OpenAIAgent, "/v1")}[kind]
    agent = agent_class(base_url=f"http://127.0.0.1:{closed_port}{path}", api_key="k", retry=retry)
    with pytest.raises(AgentError, match="connection failed"):
        agent.propose(CONTEXT)
    assert len(sleeps) == 2


# --------------------------------------------------------------------------- the budget binds every call
class Clock:
    """A clock that the injected sleep moves forward, so deadlines pass without waiting."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def deadline_agent(kind: str, server: FakeLLMServer, clock: Clock, **options):
    retry = RetryPolicy(max_retries=8, sleep=clock.sleep, clock=clock, rng=random.Random(0))
    agent_class, url = {"anthropic": (AnthropicAgent, server.anthropic_base_url),
                        "openai": (OpenAIAgent, server.openai_base_url)}[kind]
    return agent_class(base_url=options.pop("base_url", url), api_key="test-key", retry=retry, **options)


def _with_deadline(clock: Clock, seconds: float) -> AgentContext:
    return AgentContext(**{**CONTEXT.__dict__, "deadline": clock() + seconds})


@LLM_KINDS
def test_a_retry_after_past_the_deadline_is_not_waited_for(kind, server):
    clock = Clock()
    server.add_error(429, retry_after="3600")
    with pytest.raises(OutOfTime, match="3600 s to retry would end past the budget"):
        deadline_agent(kind, server, clock).propose(_with_deadline(clock, 60))
    assert clock() == 1000.0 and len(server.requests) == 1


@LLM_KINDS
def test_repeated_server_errors_stop_at_the_deadline(kind, server):
    clock = Clock()
    for _ in range(9):
        server.add_error(500)
    with pytest.raises(OutOfTime):
        deadline_agent(kind, server, clock).propose(_with_deadline(clock, 20))
    assert clock() <= 1020.0 and 2 <= len(server.requests) < 9


@pytest.mark.slow
@LLM_KINDS
def test_a_slow_reply_is_cut_at_the_deadline(kind, server):
    server.add_kernel_reply("too late", KERNEL, delay_s=30)
    started = time.monotonic()
    agent = deadline_agent(kind, server, Clock())
    agent.retry.clock = time.monotonic
    agent.retry.sleep = time.sleep
    with pytest.raises(OutOfTime):
        agent.propose(AgentContext(**{**CONTEXT.__dict__, "deadline": time.monotonic() + 2.5}))
    assert time.monotonic() - started < 15     # cut at its deadline, long before the 30 s reply (loaded-machine slack)


@LLM_KINDS
def test_two_questions_to_one_agent_overlap_and_each_gets_its_own_reply(kind, server):
    # With several GPUs two jobs' questions run on two threads at once (autokernel/search/proposals.py), over the one
    # SDK client: the first reply is held until the second question has arrived and been answered (an order, not a
    # race between the two answers on a loaded machine).
    both_asked = threading.Event()
    server.add_kernel_reply("first", KERNEL, hold=both_asked, tokens_in=1, tokens_out=1)
    server.add_kernel_reply("second", KERNEL.replace("x\n", "x * 1\n"), tokens_in=2, tokens_out=2)
    agent, replies = llm_agent(kind, server, Sleeps()), []
    threads = [threading.Thread(target=lambda: replies.append(agent.propose(CONTEXT))) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while not (len(server.requests) == 2 and server.requests[1].answered_s) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(server.requests) == 2, "the second question waited for the first reply"
    finally:
        both_asked.set()
    for thread in threads:
        thread.join(30)
    assert sorted((p.description, p.tokens_in, "x * 1" in p.kernel_source) for p in replies) == [
        ("first", 1, False), ("second", 2, True)]
    first, second = server.requests
    assert second.answered_s < first.answered_s


@LLM_KINDS
def test_the_endpoint_check_passes_and_uses_no_scripted_reply(kind, server):
    assert deadline_agent(kind, server, Clock()).check_endpoint() is None
    assert len(server.checks) == 1 and server.requests == []


@LLM_KINDS
def test_an_unreachable_endpoint_fails_its_check_within_seconds_naming_the_url(kind):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{closed_port}/v1"
    agent = deadline_agent(kind, FakeLLMServer(), Clock(), base_url=url)
    started = time.monotonic()
    with pytest.raises(AgentError, match=f"cannot reach http://127.0.0.1:{closed_port}/v1.*--base-url"):
        agent.check_endpoint()
    assert time.monotonic() - started < 10     # a refused connection fails at once; the slack is a loaded machine's


@LLM_KINDS
@pytest.mark.parametrize("problem, complaint", [("key", "rejected the key"), ("model", "--llm-model")])
def test_a_wrong_key_or_model_fails_the_check(kind, problem, complaint):
    options = {"api_key": "the-right-key"} if problem == "key" else {"models": {"some-other-model"}}
    with FakeLLMServer(**options) as server:
        with pytest.raises(AgentError, match=complaint) as caught:
            deadline_agent(kind, server, Clock()).check_endpoint()
    assert server.url in str(caught.value)


@LLM_KINDS
def test_an_overloaded_endpoint_passes_its_check_with_a_warning(kind, server):
    server.add_check_error(529)
    warning = deadline_agent(kind, server, Clock()).check_endpoint()
    assert "HTTP 529" in warning and server.url in warning
