"""Plugs optimized kernels into a model: each call runs a kernel only where it was verified and measured faster.

    plug_in(model, "optimized_kernels")          # route by the measured table (the default)
    plug_in(model, folder, policy="all")         # every verified call (correctness checks, overhead figures)
    unplug(model)                                # the original forwards back

optimized_kernels/manifest.json (autokernel/routing/manifest.py) lists each kernel file with the shapes and
dtypes bench.py verified it at, and, once verify.py has measured them on this GPU, the call
signatures where it beats PyTorch, eagerly and under torch.compile. The model keeps its class,
parameters and attributes; only forward methods are patched: its own, those of the modules a
kernel replaces (linears, norms, gated MLPs, rotary embeddings), and those of the modules whose
own code calls a routed torch function. autokernel/routing/router.py makes each decision once per call
signature and counts hits and fallbacks (with reasons) per kernel. Inference only: calls needing
gradients or under autocast fall back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Collection

import torch
from torch import nn

from autokernel.core import interpreter, paths
from autokernel.kernel_types.regions import store as region_store
from autokernel.routing import routes
from autokernel.routing.decisions import MEASURED, ModuleRoute
from autokernel.routing.kernel_ops import OptimizedKernel, load_kernels as _load_kernels
from autokernel.routing.manifest import PlugInError
from autokernel.routing.router import Router

ROUTER_ATTRIBUTE = "_autokernel_router"


def device_name() -> str:
    """The GPU route tables are measured on and looked up for ("cpu" without one)."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def load_kernels(optimized_dir: str | Path | None = None, *, exclude: Collection[str] = (),
                 on_failure: Callable[[str, Exception], None] | None = None) -> list[OptimizedKernel]:
    """The kernels optimized_dir/manifest.json lists (default: the run's optimized_kernels/), imported, by rank,
    with their route tables for this GPU; `exclude` and `on_failure` as kernel_ops.load_kernels takes them."""
    interpreter.choose()
    if interpreter.problem():
        raise PlugInError(interpreter.problem())
    folder = Path(optimized_dir or paths.OPTIMIZED_DIR)
    region_store.add_folder(folder / region_store.FOLDER)     # the regions its kernels name, saved beside them
    return _load_kernels(folder, device_name(), exclude=exclude, on_failure=on_failure)


def plug_in(model: nn.Module, optimized_dir: str | Path | None = None, *, policy: str = MEASURED,
            keep_examples: bool = False, exclude: Collection[str] = (),
            on_failure: Callable[[str, Exception], None] | None = None) -> nn.Module:
    """Route the model's calls to the kernels in optimized_dir, in place; returns the model.

    policy "measured" routes a call only where the manifest's route table says our kernel is
    faster at its signature (eagerly and under torch.compile, each on its own); "all" routes every
    call the kernels were verified for. keep_examples keeps a copy of each signature's first
    inputs, for verify to time. Plugging in again replaces the earlier kernels.

    A kept kernel is code an LLM wrote, and this imports it into your process, with your
    environment and your files. What it was checked for: bench.py ran it only in the sandbox (no
    keys, no home folder, no network, its processes killed) and judged its outputs in five stages
    and every timed call; verify ran it in that sandbox again, end to end. What no check can
    promise: that its import does nothing else when it runs here. Read the kernel files in
    optimized_kernels/ (each is short) before you plug them into a process that holds secrets.
    """
    unplug(model)
    router = Router(load_kernels(optimized_dir, exclude=exclude, on_failure=on_failure), policy=policy,
                    keep_examples=keep_examples)
    verified_shapes = {kernel_type: [shape for kernel in kernels for shape in kernel.shapes]
                       for kernel_type, kernels in router.by_type.items()}
    for path, module in model.named_modules():
        variants = routes.module_variants(module, verified_shapes)
        if variants:
            route = ModuleRoute(path or "(model)", type(module).__name__, variants)
            router.module_routes.append(route)
            router.patch(module, router, "run_module", route,
                         traced=lambda route=route: router.module_route_traced(route))
    router.patch(model, router, "run_model", model, traced=router.model_traced)
    if router.regions is not None:        # outermost: regions are routed in the model's whole graph
        router.patch(model, router.regions, "run_model", traced=router.regions.routes_compiled)
    setattr(model, ROUTER_ATTRIBUTE, router)
    return model


def compile_backend(model: nn.Module, mode: str = "default"):
    """The torch.compile backend for a plugged-in model: "inductor" when it routes no region, else the one that
    replaces its regions and then runs Inductor: torch.compile(model, backend=autokernel.compile_backend(model))."""
    router = router_of(model)
    return router.regions.compile_backend(mode) if router is not None and router.regions is not None else "inductor"


def unplug(model: nn.Module) -> nn.Module:
    """Restore the forwards plug_in patched (a no-op for a model with nothing plugged in); returns the model."""
    router = router_of(model)
    if router is None:
        return model
    router.restore()
    delattr(model, ROUTER_ATTRIBUTE)
    routes.forget_kept_tensors(model)
    return model


def router_of(model: nn.Module) -> Router | None:
    """The Router plugged into this model, or None."""
    return getattr(model, ROUTER_ATTRIBUTE, None)
