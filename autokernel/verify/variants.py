"""The six ways to run a model that verify compares, and how one of them is built, checked and timed.

PyTorch eager, torch.compile and torch.compile with CUDA graphs (mode="reduce-overhead"), and each
of the three with our kernels plugged in. A variant is timed as a whole forward call
(autokernel/verify/latency.py: median of repeats and their spread) and its output checked against the
original's. A variant that fails (a compiler error) is a finding to report, not a crash.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch

from autokernel.core.errors import failure_line
from autokernel.routing.outputs import output_error
from autokernel.verify import latency

# variant -> (its name in reports, ours or not, torch.compile mode: None eager, "default", "reduce-overhead")
VARIANTS = {
    "eager": ("PyTorch eager", False, None),
    "compile": ("torch.compile", False, "default"),
    "cudagraphs": ("torch.compile + CUDA graphs", False, "reduce-overhead"),
    "ours": ("AutoKernel", True, None),
    "ours_compile": ("AutoKernel + torch.compile", True, "default"),
    "ours_cudagraphs": ("AutoKernel + torch.compile + CUDA graphs", True, "reduce-overhead"),
    "max_autotune": ('torch.compile mode="max-autotune"', False, "max-autotune"),
}
# Timed and shown beside PyTorch's best (verify --max-autotune), never chosen by the verdict: the strongest PyTorch
# setting, whose minutes of autotuning a user may not wait for, so a win is shown against it too.
REFERENCE_ONLY = ("max_autotune",)
# Modes that run the forward as CUDA graphs: recorded after warm-up calls, on a GPU with Inductor only.
GRAPHED_MODES = ("reduce-overhead", "max-autotune")
HOW_TO_USE = {
    "eager": "model", "compile": "torch.compile(model)",
    "cudagraphs": 'torch.compile(model, mode="reduce-overhead")',
    "ours": "autokernel.plug_in(model)", "ours_compile": "torch.compile(autokernel.plug_in(model))",
    "ours_cudagraphs": 'torch.compile(autokernel.plug_in(model), mode="reduce-overhead")',
    "max_autotune": 'torch.compile(model, mode="max-autotune")',
}
# With regions routed, the compiled paths need their backend (autokernel/routing/regions/routing.py).
HOW_TO_USE_WITH_REGIONS = {
    "ours_compile": "m = autokernel.plug_in(model); torch.compile(m, backend=autokernel.compile_backend(m))",
    "ours_cudagraphs": 'm = autokernel.plug_in(model); torch.compile(m, backend=autokernel.compile_backend(m, '
                       '"reduce-overhead"))',
}
NOISE_FLOOR = 0.01
INDUCTOR = "inductor"


@dataclass
class VariantResult:
    """One variant's figures: latency per forward, error against the original, graph breaks; or why it failed."""
    variant: str
    latency: latency.Latency | None = None
    error: float | None = None
    graph_breaks: int | None = None
    graphs: int | None = None                 # graphs Dynamo compiled for the forward (1 without breaks or recompiles)
    failed: str | None = None
    baseline: latency.Latency | None = None   # PyTorch's own path, timed in turn with this one (paired runs)
    retimed: bool = False                     # its pairs taken again with long repeats (run's retime)
    seconds: float | None = None              # what building, checking and timing it took (verify's time limit)

    @property
    def ms(self) -> float | None:
        return self.latency.median_ms if self.latency else None

    def to_json(self) -> dict:
        return {"variant": self.variant, "name": VARIANTS[self.variant][0],
                "latency": self.latency.to_json() if self.latency else None, "ms": self.ms,
                "error": self.error, "graph_breaks": self.graph_breaks, "graphs": self.graphs, "failed": self.failed}


def in_mode(variant: str, ours: bool) -> str:
    """Ours (ours=True) or PyTorch's variant in the torch.compile mode of `variant` ("ours_cudagraphs", False ->
    "cudagraphs"; "compile", True -> "ours_compile")."""
    mode = VARIANTS[variant][2]
    return next(name for name, (_, is_ours, its_mode) in VARIANTS.items() if is_ours == ours and its_mode == mode)


# The most the same-mode variant may read slower apart than AutoKernel's fastest and still be paired in its place:
# on a GPU shared with other work the spread can reach 20-35% (session 18), where two variants are not alike.
LIKE_WITH_LIKE_MAX = 0.05


def bests(results: dict[str, VariantResult], allowed_error: float,
          like_with_like: bool = False) -> tuple[VariantResult | None, VariantResult | None]:
    """PyTorch's fastest variant and AutoKernel's, among those timed and correct (a reference-only one never).

    like_with_like (when the two bests are to be timed in turn, head_to_head.py): where AutoKernel's variant in the
    mode of PyTorch's best is within the noise of AutoKernel's fastest (at most LIKE_WITH_LIKE_MAX), it is the one
    paired. Figures timed apart cannot order two variants inside their noise. Session 29, LLaMA 4x1024 on an H200:
    the linear concatenation under CUDA graphs checked in turn at 1.030x PyTorch's CUDA graphs (noise 1.3%), but
    AutoKernel + torch.compile, 7.290 ms apart against 7.317 for ours with CUDA graphs (ranges 6.8-7.5), was the one
    paired with PyTorch's CUDA graphs, and read 1.00x. Without a pair the verdict keeps the fastest, whose figure
    the selection's check in turn caps (endtoend.choose): the same-mode variant may have no such figure."""
    def usable(name: str) -> bool:
        r = results.get(name)
        return (r is not None and r.ms is not None and name not in REFERENCE_ONLY
                and r.error is not None and r.error <= allowed_error)

    def best(ours: bool) -> VariantResult | None:
        return min((results[n] for n in results if VARIANTS[n][1] == ours and usable(n)), key=lambda r: r.ms,
                   default=None)
    theirs, ours = best(False), best(True)
    if like_with_like and theirs is not None and ours is not None:
        same = in_mode(theirs.variant, ours=True)
        if same != ours.variant and usable(same):
            noise = min(LIKE_WITH_LIKE_MAX, max(NOISE_FLOOR, ours.latency.spread, results[same].latency.spread))
            if results[same].ms <= ours.ms * (1 + noise):
                ours = results[same]
    return theirs, ours


def available(on_gpu: bool, compile_backend: str | None, max_autotune: bool = False) -> list[str]:
    """The variants that can run here: compiled ones when a backend is given, CUDA-graph ones with inductor on a GPU;
    max-autotune only when asked for."""
    return [name for name, (_, _, mode) in VARIANTS.items()
            if (name not in REFERENCE_ONLY or max_autotune)
            and (mode is None or (compile_backend and (mode not in GRAPHED_MODES
                                                       or on_gpu and compile_backend == INDUCTOR)))]


def compiled(model, mode: str, backend):
    """torch.compile of the model in a variant's mode ("reduce-overhead" is inductor's CUDA-graph mode); a callable
    backend is asked for the backend of that mode (a plugged-in model's regions:
    autokernel/routing/regions/routing.py)."""
    if callable(backend):
        return torch.compile(model, backend=backend(mode))
    if backend != INDUCTOR:
        return torch.compile(model, backend=backend)
    return torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)


def run(variant: str, model, inputs: tuple, expected, on_gpu: bool, backend: str = INDUCTOR,
        after_first_call: Callable[[], None] | None = None,
        paired_with: Callable[[], ContextManager] | None = None,
        after_timing: Callable[[Callable[[], object]], None] | None = None,
        retime: Callable[[VariantResult], bool] | None = None) -> VariantResult:
    """Build the variant (compiling where it asks), check its output, and time it; after_timing(call), when given, is
    handed the built variant's call before it is thrown away (it must not raise).

    paired_with() is a context in which the same model runs PyTorch's own path (the router
    bypassed): then the two are timed in turn, repeat by repeat, and result.baseline holds
    PyTorch's figure. A ratio of paired figures survives a machine that drifts between runs. Where retime(result)
    says the pairs cannot decide (selection.py), they are taken once more, of the same build, with long repeats.
    """
    from torch._dynamo.utils import counters

    mode = VARIANTS[variant][2]
    result = VariantResult(variant)
    started = time.monotonic()
    torch._dynamo.reset()
    counters.clear()
    try:
        fn = model if mode is None else compiled(model, mode, backend)
        with torch.no_grad():
            fn(*inputs)                           # compiles, or resolves the routes eagerly
            if after_first_call is not None:
                after_first_call()
            for _ in range(2 if mode in GRAPHED_MODES else 0):
                fn(*inputs)                       # CUDA graphs are recorded after warm-up calls
            # Compared at once, before any other call could reuse the output's memory: no copy of it is held.
            result.error = output_error(expected, fn(*inputs))
            graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
            if paired_with is None:
                result.latency = latency.wall_clock(lambda: fn(*inputs), on_gpu)
            else:
                def pytorch():
                    with paired_with():
                        return fn(*inputs)
                for _ in range(3 if mode in GRAPHED_MODES else 1):
                    pytorch()                     # compiles and records PyTorch's own graph too
                result.latency, result.baseline = latency.paired(lambda: fn(*inputs), pytorch, on_gpu)
                if retime is not None and retime(result):
                    result.latency, result.baseline = latency.paired(lambda: fn(*inputs), pytorch, on_gpu,
                                                                     repeat_seconds=latency.LONG_REPEAT_SECONDS)
                    result.retimed = True
            if after_timing is not None:
                after_timing(lambda: fn(*inputs))
    except Exception as exc:        # a compiler error is a finding to report, not a crash
        result.failed = failure_line(exc)
        # The whole traceback, unmarked: in verify's sandboxed child it goes to workspace/torch.log, where a bug
        # report (ours or torch's) can start from it; the terminal keeps the one line.
        print(f"{VARIANTS[variant][0]} failed:", file=sys.stderr)
        traceback.print_exc()
        graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    if mode is not None:
        result.graphs, result.graph_breaks = graphs, max(breaks, graphs - 1)
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()       # what this variant cached goes back before the next one is built
    result.seconds = time.monotonic() - started
    return result


def run_routed(variant: str, model, inputs: tuple, expected, on_gpu: bool, backend: str, kernels: list,
               log: Callable[[str], None], after_first_call: Callable[[], None] | None = None,
               paired_with: Callable[[], ContextManager] | None = None,
               retime: Callable[[VariantResult], bool] | None = None) -> VariantResult:
    """run(), and when a compiled variant fails with Triton ops in it, once more with those traced as opaque ops."""
    result = run(variant, model, inputs, expected, on_gpu, backend, after_first_call, paired_with, retime=retime)
    triton_ops = [k for k in kernels if k.op_kind == "triton_op"]
    if result.failed and VARIANTS[variant][2] and triton_ops:
        for kernel in triton_ops:
            kernel.use_opaque_op(f"its Triton op failed in torch.compile: {result.failed[:120]}")
        log(f"{VARIANTS[variant][0]} failed with Triton ops ({result.failed[:120]}); again with opaque custom ops")
        result = run(variant, model, inputs, expected, on_gpu, backend, after_first_call, paired_with, retime=retime)
    return result
