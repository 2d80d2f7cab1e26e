"""The Python API: optimize a model in memory with the whole pipeline, or plug in kernels optimized before.

    import autokernel
    model = autokernel.optimize(model, sample_inputs, budget_hours=2)   # profile, optimize, plug in
    model = autokernel.plug_in(model)                                   # kernels from optimized_kernels/
    autokernel.fold_batch_norms(model, sample_inputs)                   # eval mode: batch norms into their layers
    autokernel.concat_linears(model, sample_inputs)                     # eval mode: q, k, v (gate, up) as one GEMM

optimize() runs what `autokernel optimize` runs (autokernel/search/session.py), with the same run
settings: it checks everything first (the repository, the agent and its endpoint) and writes
nothing before those checks pass; then the profiler on the model object (writing
workspace/optimization_plan.json), extract.py for the `top` hottest kernel types, and the
keep-or-revert loop, which needs a git repository: the one the program runs in, or the folder
AUTOKERNEL_WORKDIR names (autokernel/core/paths.py). It commits every experiment on a branch
autokernel/<tag>, leaves that branch checked out, since optimized_kernels/ is there, and writes
optimized_kernels/. It logs how each kernel really ended
(done, cut short by the budget, skipped, not started) and warns when not all were finished.
Then it does what `autokernel verify` does on sample_inputs (autokernel/verify/handover.py): checks that
the model's output with every kernel plugged in matches the original's within the dtype's
tolerance, and compares PyTorch eager, torch.compile and torch.compile with CUDA graphs, each with
and without the kernels. What comes back is the fastest correct of those paths, never slower than
PyTorch's best: the model, compiled where that won, with the kernels plugged in only where they
made it faster. Its `autokernel_choice` attribute says which path it is and why. Inference only:
the model must be in eval mode, and its kernels are used only where no gradient is needed.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from autokernel.core import paths
from autokernel.routing.bn_folding import fold_batch_norms, unfold_batch_norms
from autokernel.routing.linear_concat import concat_linears, unconcat_linears
from autokernel.routing.manifest import PlugInError
from autokernel.routing.plugin import compile_backend, plug_in, unplug
from autokernel.sandbox.child_env import SANDBOXED_CHILD_VARIABLE
from autokernel.verify import handover, isolated

__all__ = ["optimize", "plug_in", "unplug", "compile_backend", "fold_batch_norms", "unfold_batch_norms",
           "concat_linears", "unconcat_linears"]
BACKENDS = paths.BACKENDS
DEFAULT_BUDGET_HOURS = 8


def _needs_gradients(inputs: tuple) -> bool:
    # Parameters that require grad are the norm, and harmless under torch.no_grad(); inputs that
    # require grad say the model is meant to be differentiated, where the kernels never run.
    return any(t.requires_grad for t in inputs if isinstance(t, torch.Tensor))


def optimize(model: nn.Module, sample_inputs, backend: str = "triton", budget_hours: float | None = None,
             agent: str | None = None, top: int = 3, tag: str | None = None, *, llm_model: str | None = None,
             base_url: str | None = None, max_cost_usd: float | None = None, resume: bool = False,
             **settings) -> nn.Module:
    """Profile the model, optimize its `top` hottest kernel types within `budget_hours`, and hand back the fastest path.

    sample_inputs: one tensor or a tuple/list of forward() arguments, on the model's device.
    backend: "triton", "cuda" (start from the CUDA C++ starters in kernels/cuda/) or "any" (Triton starters; the
    LLM agent may switch to CUDA C++), as --backend.
    agent: "anthropic", "openai" or "builtin"; None picks by which API key is set.
    llm_model, base_url, max_cost_usd: as --llm-model, --base-url and --max-cost.
    tag: the run's name (its branch is autokernel/<tag>); None makes one from the class name and time.
    resume: continue the saved run (its settings, overridden by any given here) instead of profiling.
    settings: any other run setting by its RunSettings name (experiment_timeout_s, max_consecutive_reverts,
    max_malformed, kernel_time_s, target_speedup, peak_fraction_target, noise_floor, quick_bench, reasoning).
    Returns the model to run: `model` itself (plugged in only if that is the fastest path), or
    torch.compile of it; its `autokernel_choice` says which and why (autokernel.unplug restores
    the model). Without a GPU nothing is timed for real, so PyTorch's own path comes back.
    """
    from autokernel.core import interpreter
    from autokernel.core.contracts import RunSettings
    from autokernel.core.live import ProgressView
    from autokernel.profile import planning
    from autokernel.search import session

    interpreter.choose()        # first: no GPU means Triton's interpreter
    if os.environ.get(SANDBOXED_CHILD_VARIABLE):
        raise RuntimeError("autokernel.optimize was called while its own end-to-end check loaded your script: guard "
                           "the call with `if __name__ == \"__main__\":`, as multiprocessing requires")

    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported: the backend must be one of {BACKENDS}")
    if budget_hours is not None and not budget_hours > 0:
        raise ValueError(f"budget_hours must be more than 0, got {budget_hours}")
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    if model.training:
        raise ValueError("the model is in training mode; AutoKernel optimizes inference: call model.eval() first")
    inputs = tuple(sample_inputs) if isinstance(sample_inputs, (tuple, list)) else (sample_inputs,)
    given = {name: value for name, value in {
        "budget_s": None if budget_hours is None else budget_hours * 3600, "agent": agent, "llm_model": llm_model,
        "base_url": base_url, "max_cost_usd": max_cost_usd, **settings}.items() if value is not None}
    try:
        new_settings = RunSettings(**{"budget_s": DEFAULT_BUDGET_HOURS * 3600,
                                      "quick_bench": not torch.cuda.is_available(), **given})
    except TypeError as exc:
        raise ValueError(f"unknown run setting: {exc}") from None
    if _needs_gradients(inputs):
        warnings.warn("the sample inputs need gradients: the optimized kernels are inference only, so they are used "
                      "only under torch.no_grad() or torch.inference_mode(); elsewhere every call falls back to "
                      "PyTorch", stacklevel=2)

    view = ProgressView()
    name = type(model).__name__
    state = session.run_optimization(
        plan=lambda log: planning.jobs_from_profile(model, inputs, name=name, top=top, log=log, backend=backend),
        settings=new_settings, overrides=given, tag=tag if resume else tag or session.default_tag(name),
        resume=resume, view=view, stay_on_run_branch=True)
    for line in session.outcome_lines(state):
        view.log(line)
    if not state.done:
        warnings.warn(f"not every kernel was optimized ({state.stopped_because}); the ones saved are compared end to "
                      f"end, and optimize(..., resume=True) goes on", stacklevel=2)

    on_gpu = torch.cuda.is_available() and any(t.is_cuda for t in inputs if isinstance(t, torch.Tensor))
    try:
        # The kept kernels are code an LLM wrote: compared in a sandboxed child, never imported here unless they win.
        compared = isolated.compare_in_sandbox(model, inputs, paths.OPTIMIZED_DIR, on_gpu=on_gpu,
                                               compile_backend="inductor" if on_gpu else None, log=view.log)
    except isolated.SandboxedCheckFailed as exc:
        warnings.warn(f"the end-to-end check could not run ({exc}); PyTorch's own path is handed back, and the kernels "
                      f"are in {paths.OPTIMIZED_DIR} (autokernel verify MODEL_FILE checks them)", stacklevel=2)
        return handover.runnable(model, paths.OPTIMIZED_DIR, handover.NOT_COMPARED)
    checked = compared["checked"]
    if not checked["passed"]:
        raise PlugInError(f"with the optimized kernels plugged in, the model's output differs from the original's by "
                          f"{checked['max_error']:.3g} (relative to the output's scale; tolerance "
                          f"{compared['tolerance']:g}), so they were taken out again; the kernels are in "
                          f"{paths.OPTIMIZED_DIR}")
    if compared["dropped"]:      # a kernel that broke the forward or was off end to end: out, said, not raised
        warnings.warn("the end-to-end check dropped " + "; ".join(
            f"{d['unit']} ({d['stage']}: {d['reason']})" for d in compared["dropped"]) + "; the rest is compared "
            "without them", stacklevel=2)
    view.log(f"end to end: {compared['verdict']['summary']}")
    return handover.runnable(model, paths.OPTIMIZED_DIR, compared["verdict"], inputs)
