"""A module's forward run through AutoKernel's code (the router's routes, the batch norm folds), without a patch on
the instance: the module's class is swapped for a subclass whose forward runs the module's own stack of runs.

    run = patch(module, owner, "method", *data)   # owner.method(*data, original, args, kwargs) now runs the forward
    set_traced(module, run, False)                # torch.compile traces the forward without it (it does nothing there)
    unpatch(module, run)                          # that run taken off; with none left, the class is its own again

Why a class and not an instance forward: under torch.compile, Dynamo checks before every call that what it traced
still holds. A forward patched onto the instance is a closure Dynamo must check cell by cell, with the partial in it
(its function, its arguments), ~29 guard lines a module; and a model whose own forward is patched is reached through
that closure, so its every parameter gets a full tensor check where an unpatched model's parameters are its graph's
inputs. A run is a plain record (an owner, its method's name, the data it is called with), not a closure or a
partial, for the same reason: Dynamo checks a partial's function and arguments too. Measured on the CPU (torch 2.13):
KernelBench ResNet-18 with 20 batch norm folds, 1865 guard lines as it is, 3043 with instance patches, 2639 with
swapped classes running partials; the tiny GPT-2 with its starters plugged in, 487 as it is and 1405 with instance
patches. Under CUDA graphs a compiled call's host time is its guards plus the graph's replay:
on the H200, a plugged-in ResNet-18 with nothing routed took 0.43 ms a call against 0.24 ms
(benchmarks/results/2026-11-29_NVIDIA-H200_gate_s16/).

A run that changes nothing in a compiled forward (a router's module route with no decision to route compiled, the
router's own run of the model when no function is routed compiled) is taken out of Dynamo's trace: each run traced
costs ~25 guard lines (its record, its owner's attributes, the decision looked up), checked before every call. Its
owner says so (set_traced), before the compile and again whenever that could change (a guard sees the change and
compiles again); traced, the patched forward runs only the traced runs, read as one attribute (2 guard lines when
there are none). An owner that leaves a run traced while it does nothing costs guards, never correctness; one that
untraced a run that acts would compile the forward without it, so its test must be exact or err towards tracing
(autokernel/routing/router.py). Measured on the CPU (torch 2.13), nothing routed compiled: the tiny GPT-2 with its
starters, 866 guard lines traced through, 564 without (487 as it is); KernelBench's conv + batch norm + ReLU with its
fold and its region starter, 250 and 207 (the fold alone 203).

Runs are taken off by identity, in any order, by whoever put them on; the class is restored only when the last goes,
so two users of a module (the router and a fold) never restore each other's class.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, NamedTuple

import torch
from torch import nn

RUNS = "_autokernel_runs"           # on a patched module: its runs, innermost first
TRACED = "_autokernel_traced"       # on a patched module: the runs a torch.compile trace runs, as a tuple
UNTRACED = "_autokernel_untraced"   # on a patched module: the runs its owners took out of the trace
INSTANCE_FORWARD = "_autokernel_instance_forward"    # a forward the instance had of its own, run innermost
_PATCHED_CLASSES: dict[type, type] = {}


class Run(NamedTuple):
    """owner.<method>(*data, original, args, kwargs) runs the module's forward; original is its forward so far."""
    owner: Any
    method: str
    data: tuple


def patch(module: nn.Module, owner: Any, method: str, *data) -> Run:
    """module's forward becomes owner.method(*data, its forward so far, args, kwargs); the run, to unpatch it."""
    run = Run(owner, method, data)
    runs = module.__dict__.get(RUNS)
    if runs is None:
        if "forward" in module.__dict__:     # a forward set on the instance (a test's, accelerate's hooks) would
            module.__dict__[INSTANCE_FORWARD] = module.__dict__.pop("forward")    # shadow the class's: ours wraps it
        module.__dict__[RUNS] = runs = []
        module.__dict__[UNTRACED] = []
        module.__class__ = _patched_class(type(module))
    runs.append(run)
    _retrace(module)
    return run


def set_traced(module: nn.Module, run: Run, traced: bool) -> None:
    """Whether Dynamo's trace of the module's forward runs `run` (it does at first; eager calls always run it)."""
    runs = module.__dict__.get(RUNS)
    if runs is None or not any(on is run for on in runs):
        return
    untraced = [off for off in module.__dict__[UNTRACED] if off is not run]
    module.__dict__[UNTRACED] = untraced + ([] if traced else [run])
    _retrace(module)


def _retrace(module: nn.Module) -> None:
    untraced = module.__dict__[UNTRACED]
    module.__dict__[TRACED] = tuple(run for run in module.__dict__[RUNS]
                                    if not any(off is run for off in untraced)) or None


def unpatch(module: nn.Module, run: Run) -> None:
    """Take `run` off module's forward (a no-op where it is not on); the class is restored with the last run."""
    runs = module.__dict__.get(RUNS)
    if runs is None:
        return
    for i, on in enumerate(runs):
        if on is run:
            del runs[i]
            break
    module.__dict__[UNTRACED] = [off for off in module.__dict__[UNTRACED] if off is not run]
    _retrace(module)
    if not runs:
        for name in (RUNS, TRACED, UNTRACED):
            del module.__dict__[name]
        module.__class__ = original_class(type(module))
        if INSTANCE_FORWARD in module.__dict__:
            module.__dict__["forward"] = module.__dict__.pop(INSTANCE_FORWARD)


def runs_of(module: nn.Module) -> list[Run]:
    return list(module.__dict__.get(RUNS, ()))


def original_class(cls: type) -> type:
    """The class a patched module had before patch() (cls itself for an unpatched class)."""
    return getattr(cls, "_autokernel_original", cls)


def _patched_class(cls: type) -> type:
    """cls with a forward that runs the module's runs around cls.forward; made once per class. Its name stays the
    class's, as the model prints, and inspect.signature(module.forward) is still cls.forward's."""
    patched = _PATCHED_CLASSES.get(cls)
    if patched is None:
        @functools.wraps(cls.forward)
        def forward(self, *args, **kwargs):
            call = self.__dict__.get(INSTANCE_FORWARD) or functools.partial(cls.forward, self)
            # Traced, the runs are read as an attribute, with the module's other attributes (one guard fewer), and
            # None for none (one guard line, where an empty tuple is three)
            for run in (getattr(self, TRACED) or ()) if torch.compiler.is_compiling() else self.__dict__[RUNS]:
                call = functools.partial(_through, run, call)
            return call(*args, **kwargs)
        patched = _PATCHED_CLASSES[cls] = type(cls.__name__, (cls,), {
            "forward": forward, "_autokernel_original": cls, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__})
    return patched


def _through(run: Run, original, *args, **kwargs):
    return getattr(run.owner, run.method)(*run.data, original, args, kwargs)


def hookable_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """The model's modules, (path, module), that take forward hooks: every one but a TorchScript module's
    (torch.jit.script), which refuses them ("register_forward_pre_hook is not supported on ScriptModules") and runs
    inside TorchScript, where no hook would be called; its submodules are TorchScript modules too."""
    return ((path, module) for path, module in model.named_modules()
            if not isinstance(module, torch.jit.ScriptModule))
