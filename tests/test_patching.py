"""A module's forward run through AutoKernel's code by swapping its class: composed in order, undone in any order."""

import inspect

import pytest
import torch
from torch import nn

from autokernel.core import patching


class Tagger:
    """A run's owner: adds its tag to the output, and notes the order the runs were entered in."""

    def __init__(self, seen: list):
        self.seen = seen

    def run(self, tag: float, original, args, kwargs):
        self.seen.append(tag)
        return original(*args, **kwargs) + tag


def test_runs_compose_last_patched_outermost_and_the_class_comes_back_with_the_last():
    linear, seen = nn.Linear(3, 2), []
    x = torch.randn(4, 3)
    expected = linear(x)
    first = patching.patch(linear, Tagger(seen), "run", 1.0)
    second = patching.patch(linear, Tagger(seen), "run", 10.0)
    assert type(linear) is not nn.Linear and isinstance(linear, nn.Linear) and repr(linear).startswith("Linear(")
    assert torch.allclose(linear(x), expected + 11.0) and seen == [10.0, 1.0]
    patching.unpatch(linear, first)                # the inner one first: the other keeps running
    assert torch.allclose(linear(x), expected + 10.0) and type(linear) is not nn.Linear
    patching.unpatch(linear, first)                # taken off already: nothing happens
    patching.unpatch(linear, second)
    assert type(linear) is nn.Linear and patching.RUNS not in vars(linear)
    assert torch.equal(linear(x), expected)


def test_a_patched_forward_keeps_its_signature_and_one_class_is_made_per_class():
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    patching.patch(a, Tagger([]), "run", 0.0)
    patching.patch(b, Tagger([]), "run", 0.0)
    assert type(a) is type(b) and patching.original_class(type(a)) is nn.Linear
    assert inspect.signature(a.forward) == inspect.signature(nn.Linear(3, 2).forward)


def test_a_compiled_patched_module_traces_through_its_runs():
    linear = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    expected = linear(x) + 2.0
    patching.patch(linear, Tagger([]), "run", 2.0)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            assert torch.allclose(torch.compile(linear, backend="eager", fullgraph=True)(x), expected)
    finally:
        torch._dynamo.reset()


def test_a_forward_set_on_the_instance_runs_innermost_and_comes_back():
    linear = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    own = lambda x: nn.Linear.forward(linear, x) * 2.0      # noqa: E731 (what accelerate's hooks or a test set)
    linear.forward = own
    run = patching.patch(linear, Tagger([]), "run", 1.0)
    assert "forward" not in vars(linear)
    assert torch.allclose(linear(x), nn.Linear.forward(linear, x) * 2.0 + 1.0)
    patching.unpatch(linear, run)
    assert vars(linear)["forward"] is own and type(linear) is nn.Linear


def test_an_untraced_run_runs_eagerly_and_a_compiled_forward_follows_it_when_traced_again():
    # An owner takes a run out of Dynamo's trace where it does nothing under torch.compile: it costs no guards there.
    linear = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    own = linear(x)
    run = patching.patch(linear, Tagger([]), "run", 2.0)
    patching.set_traced(linear, run, False)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(linear, backend="eager", fullgraph=True)
            assert torch.allclose(compiled(x), own) and torch.allclose(linear(x), own + 2.0)
            patching.set_traced(linear, run, True)          # a guard on the traced runs: compiled again, with it
            assert torch.allclose(compiled(x), own + 2.0)
    finally:
        torch._dynamo.reset()
    patching.unpatch(linear, run)
    assert type(linear) is nn.Linear and not any(name.startswith("_autokernel") for name in vars(linear))


class _Scripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.jit.script(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


def test_a_torchscript_module_and_what_is_inside_it_take_no_hooks():
    model = _Scripted()
    # TorchScript refuses a hook: every walk that hooks the model's modules would fail on it.
    with pytest.raises(RuntimeError, match="not supported on ScriptModules"):
        model.block.register_forward_pre_hook(lambda *_: None)
    assert [path for path, _ in patching.hookable_modules(model)] == ["", "head"]
