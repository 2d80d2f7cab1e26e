"""The agents that propose a new kernel.py each experiment: Anthropic, OpenAI and the built-in search (base: the
interface the loop talks to; factory: the agent a run's settings name)."""
