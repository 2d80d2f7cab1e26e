"""benchmarks/suites/plugged_overhead.py's guard count finds the compiled frame's guards, whatever frame Dynamo entered."""

import re

import pytest
import torch
from torch import nn

from autokernel.core import patching
from benchmarks.suites.plugged_overhead import guard_cost


class Doubler:
    def run(self, original, args, kwargs):
        return original(*args, **kwargs) * 2.0


class Own(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


# A container of torch.nn's is compiled through torch.compile's wrapper frame (its cell holds the model), a model of
# its own class through its forward, a patched one through its class's forward (its cell holds the class): the guard
# count said "no cache entry found" for KernelBench's conv + batch norm + ReLU, an nn.Sequential.
@pytest.mark.parametrize("make, patched", [(lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU()), False),
                                           (Own, False), (Own, True)], ids=["sequential", "own class", "patched"])
def test_the_guards_of_a_compiled_model_are_found_and_checked(make, patched):
    model, x = make().eval(), torch.randn(2, 4)
    if patched:
        patching.patch(model, Doubler(), "run")
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend="eager")
            compiled(x)
            found = guard_cost(model, (x,), compiled)
    finally:
        torch._dynamo.reset()
    assert re.fullmatch(r"guards: [\d.]+ us a call \(\d+ lines, \d+ of them Python lambdas\)", found), found
