"""What an LLM call used and cost: its tokens, with the cached and reasoning ones counted apart.

Both providers report them: Anthropic's usage gives the uncached input, the input written to and
read from the prompt cache, and the output with its thinking tokens; OpenAI's gives the prompt with
its cached part and the completion with its reasoning part. A Usage holds them the same way: `input`
and `output` are totals, `cached`, `cache_write` and `reasoning` parts of them. Reasoning tokens
are billed as output; cached input at the provider's cached rate, cache writes at its write rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REASONING_LEVELS = ("low", "medium", "high")


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""
    input: float
    output: float
    cached_input: float             # input read from the prompt cache
    cache_write: float              # input written to the prompt cache


Prices = dict[str, Price]


@dataclass
class Usage:
    input: int = 0                  # every prompt token: uncached, written to the cache, read from it
    output: int = 0                 # every completion token, reasoning included
    cached: int = 0                 # of input: read from the prompt cache
    cache_write: int = 0            # of input: written to the prompt cache
    reasoning: int = 0              # of output: hidden reasoning or thinking

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cached + other.cached,
                     self.cache_write + other.cache_write, self.reasoning + other.reasoning)

    def describe(self) -> str:
        return (f"{self.input} tokens in ({self.cached} cached, {self.cache_write} written to the cache), "
                f"{self.output} out ({self.reasoning} reasoning)")


def price_of(model: str, prices: Prices) -> Price | None:
    # Dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4.1-2025-04-14") cost what their alias costs.
    return prices.get(model) or prices.get(re.sub(r"-(\d{8}|\d{4}-\d{2}-\d{2})$", "", model))


def cost_usd(model: str, prices: Prices, usage: Usage) -> float | None:
    """What a call cost, or None for a model missing from the price table (local servers, new models)."""
    price = price_of(model, prices)
    if price is None:
        return None
    uncached = max(0, usage.input - usage.cached - usage.cache_write)
    return (uncached * price.input + usage.cached * price.cached_input + usage.cache_write * price.cache_write
            + usage.output * price.output) / 1e6
