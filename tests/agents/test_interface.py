"""The Agent interface declares everything the loop asks of an agent: autokernel/search/ reads no attribute of an
agent that autokernel/agents/base.py's Agent does not declare, and probes none with hasattr or getattr, so a new
agent learns what it must and may provide from one class."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from autokernel.agents.base import Agent
from autokernel.agents.builtin import BuiltinAgent

SEARCH = Path(__file__).resolve().parents[2] / "autokernel" / "search"
PROBES = {"hasattr", "getattr", "setattr"}


def _is_agent(node: ast.expr) -> bool:
    """`agent` or `<anything>.agent`: how the loop's modules hold their agent."""
    return (isinstance(node, ast.Name) and node.id == "agent") or (
        isinstance(node, ast.Attribute) and node.attr == "agent")


def agent_uses(source: str) -> tuple[set[str], list[str]]:
    """The attributes read off an agent, and the hasattr/getattr/setattr calls made on one (as source text)."""
    used, probes = set(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_agent(node.value):
            used.add(node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES
              and node.args and _is_agent(node.args[0])):
            probes.append(ast.unparse(node))
    return used, probes


def declared() -> set[str]:
    names = set(Agent.__annotations__)
    return names | {name for name, _ in inspect.getmembers(Agent) if not name.startswith("_")}


def test_the_scan_sees_an_undeclared_hook_and_a_probe():
    used, probes = agent_uses("def f(self, agent):\n    agent.propose(1)\n    self.agent.forget()\n"
                              "    if hasattr(self.agent, 'tired'):\n        pass\n")
    assert used == {"propose", "forget"} and probes == ["hasattr(self.agent, 'tired')"]
    assert used - declared() == {"forget"}


def test_the_loop_uses_only_what_the_interface_declares_and_probes_nothing():
    used, probes = set(), []
    for path in sorted(SEARCH.rglob("*.py")):
        found, probed = agent_uses(path.read_text())
        used |= found
        probes += [f"{path.name}: {call}" for call in probed]
    assert probes == []
    assert used and used - declared() == set()


def test_an_agent_with_only_propose_gets_the_loops_defaults():
    class Minimal(Agent):
        name = kind = "minimal"
        model = base_url = None

        def propose(self, ctx):
            raise NotImplementedError

    agent = Minimal()
    # As the loop behaved when a hook was missing: asked on a thread, no price check, nothing saved, nothing told.
    assert agent.instant is False and agent.has_prices() is True and agent.check_endpoint() is None
    assert agent.state_dict() is None and agent.load_state({}) is None and agent.judged({}, "", None) is None


def test_every_agent_the_factory_makes_is_an_agent():
    from autokernel.agents.anthropic_agent import AnthropicAgent
    from autokernel.agents.openai_agent import OpenAIAgent

    assert all(issubclass(cls, Agent) for cls in (BuiltinAgent, AnthropicAgent, OpenAIAgent))
