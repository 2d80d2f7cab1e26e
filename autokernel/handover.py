"""Hands the user the faster of AutoKernel's best and PyTorch's best: compare, record what was measured, build it.

verify.py and autokernel.optimize both come here. `compare_and_record` runs the end-to-end
comparison (autokernel/endtoend.py) on the model and its inputs, and on a GPU writes each kernel's
measured route table into the manifest, so that a later plug_in routes exactly the calls that were
measured faster. `runnable` builds the path the verdict chose: the model as it is, or compiled,
with our kernels plugged in only when that path won. Never slower than what the user had: when no
AutoKernel variant beats PyTorch's best by more than the noise, PyTorch's best is what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from autokernel import endtoend, manifest, paths, plugin
from autokernel.variants import INDUCTOR, VARIANTS

CHOICE_ATTRIBUTE = "autokernel_choice"


@dataclass(frozen=True)
class Choice:
    """Which path autokernel.optimize handed over, and why."""
    variant: str            # a key of variants.VARIANTS
    name: str               # "torch.compile + CUDA graphs", "AutoKernel + torch.compile"...
    summary: str            # the verdict, one line
    use_code: str           # the same path written as code
    faster: bool            # whether it is AutoKernel's (faster than PyTorch's best by more than the noise)


def compare_and_record(model: nn.Module, inputs: tuple, optimized_dir: str | Path, *, on_gpu: bool,
                       compile_backend: str | None = INDUCTOR, policy: str = plugin.MEASURED, overhead: bool = False,
                       log: Callable[[str], None] = lambda line: None) -> dict:
    """The end-to-end comparison as plain data (and the kernels' router summary); the model is left unplugged."""
    def plug(policy: str, keep_examples: bool):
        return plugin.router_of(plugin.plug_in(model, optimized_dir, policy=policy, keep_examples=keep_examples))

    try:
        compared = endtoend.compare(model, inputs, plug, on_gpu=on_gpu, compile_backend=compile_backend,
                                    policy=policy, overhead=overhead, log=log)
        router = plugin.router_of(model)
        records = compared.pop("records")
        if on_gpu:
            manifest.write_route_tables(Path(optimized_dir) / paths.MANIFEST_NAME, {
                kernel.name: (kernel.source_sha256, plugin.device_name(), records.get(kernel.name, []))
                for kernel in router.kernels})
    finally:
        plugin.unplug(model)
    return compared


def runnable(model: nn.Module, optimized_dir: str | Path, verdict: dict) -> nn.Module:
    """The model to run on the verdict's path (plugged in and compiled as it says), with its Choice attached."""
    variant = verdict["use"]
    name, ours, mode = VARIANTS[variant]
    if ours:
        plugin.plug_in(model, optimized_dir)
    backend = plugin.compile_backend(model, mode or "default") if ours else "inductor"
    if mode is None:
        result = model
    elif backend != "inductor":        # routed regions: their backend, in this mode, then Inductor
        result = torch.compile(model, backend=backend)
    else:
        result = torch.compile(model) if mode == "default" else torch.compile(model, mode=mode)
    setattr(result, CHOICE_ATTRIBUTE, Choice(variant, name, verdict["summary"], verdict["use_code"], verdict["faster"]))
    return result
