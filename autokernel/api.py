"""The Python API: optimize a model in memory with the whole pipeline, or plug in kernels optimized before.

    import autokernel
    model = autokernel.optimize(model, sample_inputs, budget_hours=2)   # profile, optimize, plug in
    model = autokernel.plug_in(model)                                   # kernels from optimized_kernels/

optimize() runs what `autokernel optimize` runs, through orchestrate.py: the profiler on the model
object (writing workspace/optimization_plan.json), extract.py for the `top` hottest kernel types,
and the keep-or-revert loop, which needs the AutoKernel checkout's git repository (it commits
every experiment on a branch autokernel/<tag>) and writes optimized_kernels/. Then it does what
`autokernel verify` does on sample_inputs (autokernel/handover.py): checks that the model's output
with every kernel plugged in matches the original's within the dtype's tolerance, and compares
PyTorch eager, torch.compile and torch.compile with CUDA graphs, each with and without the kernels.
What comes back is the fastest correct of those paths, never slower than PyTorch's best: the
model, compiled where that won, with the kernels plugged in only where they made it faster. Its
`autokernel_choice` attribute says which path it is and why. Inference only: the model must be in
eval mode.
"""

from __future__ import annotations

import torch
from torch import nn

from autokernel import handover, paths
from autokernel.plugin import PlugInError, plug_in, unplug

__all__ = ["optimize", "plug_in", "unplug"]
BACKENDS = ("triton",)


def optimize(model: nn.Module, sample_inputs, backend: str = "triton", budget_hours: float = 8,
             agent: str | None = None, top: int = 3, tag: str | None = None) -> nn.Module:
    """Profile the model, optimize its `top` hottest kernel types within `budget_hours`, and hand back the fastest path.

    sample_inputs: one tensor or a tuple/list of forward() arguments, on the model's device.
    agent: "anthropic", "openai" or "builtin"; None picks by which API key is set.
    tag: the run's name (its branch is autokernel/<tag>); None makes one from the class name and time.
    Returns the model to run: `model` itself (plugged in only if that is the fastest path), or
    torch.compile of it; its `autokernel_choice` says which and why (autokernel.unplug restores
    the model). Without a GPU nothing is timed for real, so PyTorch's own path comes back.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported: AutoKernel writes Triton kernels, "
                         f"so the backend must be one of {BACKENDS}")
    if not budget_hours > 0:
        raise ValueError(f"budget_hours must be more than 0, got {budget_hours}")
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    if model.training:
        raise ValueError("the model is in training mode; AutoKernel optimizes inference: call model.eval() first")
    inputs = tuple(sample_inputs) if isinstance(sample_inputs, (tuple, list)) else (sample_inputs,)

    import orchestrate
    from autokernel.live import ProgressView

    view = ProgressView()
    name = type(model).__name__
    jobs = orchestrate.jobs_from_profile(model, inputs, name=name, top=top, log=view.log)
    settings = orchestrate.LoopSettings(budget_s=budget_hours * 3600, quick_bench=not torch.cuda.is_available())
    orchestrate.run_optimization(jobs=jobs, agent=agent, tag=tag or orchestrate.default_tag(name, None),
                                 settings=settings, view=view)

    on_gpu = torch.cuda.is_available() and any(t.is_cuda for t in inputs if isinstance(t, torch.Tensor))
    compared = handover.compare_and_record(model, inputs, paths.OPTIMIZED_DIR, on_gpu=on_gpu,
                                           compile_backend="inductor" if on_gpu else None, log=view.log)
    checked = compared["checked"]
    if not checked["passed"]:
        raise PlugInError(f"with the optimized kernels plugged in, the model's output differs from the original's by "
                          f"{checked['max_error']:.3g} (relative to the output's scale; tolerance "
                          f"{compared['tolerance']:g}), so they were taken out again; the kernels are in "
                          f"{paths.OPTIMIZED_DIR}")
    view.log(f"end to end: {compared['verdict']['summary']}")
    return handover.runnable(model, paths.OPTIMIZED_DIR, compared["verdict"])
