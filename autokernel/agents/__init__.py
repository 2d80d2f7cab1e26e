"""The agents that propose a new kernel.py each experiment: Anthropic, OpenAI and the built-in search."""

from autokernel.agents.base import (Agent, AgentContext, AgentError, MalformedReply, Proposal, RetryPolicy,
                                    SearchExhausted)
from autokernel.agents.factory import make_agent

__all__ = ["Agent", "AgentContext", "AgentError", "MalformedReply", "Proposal", "RetryPolicy",
           "SearchExhausted", "make_agent"]
