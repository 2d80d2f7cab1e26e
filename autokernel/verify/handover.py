"""Hands the user the faster of AutoKernel's best and PyTorch's best: compare, record what was measured, build it.

verify.py and autokernel.optimize both come here, each from a sandboxed child process
(autokernel/verify/isolated.py), since the kernels are code an LLM wrote. `compare` runs the end-to-end
comparison (autokernel/verify/endtoend.py) on the model and its inputs, and hands back, as data, each
kernel's measured route table; `record_route_tables` (in the user's process) writes them into the
manifest, so that a later plug_in routes exactly the calls that were measured faster. `runnable`
builds the path the verdict chose: the model as it is, or compiled, with our kernels plugged in
only when that path won. Never slower than what the user had: when no AutoKernel variant beats
PyTorch's best by more than the noise, PyTorch's best is what comes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from autokernel.routing import manifest, plugin
from autokernel.routing.decisions import MEASURED
from autokernel.verify import endtoend, rewrites
from autokernel.verify.containment import Drops
from autokernel.verify.variants import INDUCTOR, VARIANTS

CHOICE_ATTRIBUTE = "autokernel_choice"
# The verdict when no comparison could run: the model as it is.
NOT_COMPARED = {"use": "eager", "summary": "not compared: the model is handed back as it is", "use_code": "model",
                "faster": False}


@dataclass(frozen=True)
class Choice:
    """Which path autokernel.optimize handed over, and why."""
    variant: str            # a key of variants.VARIANTS
    name: str               # "torch.compile + CUDA graphs", "AutoKernel + torch.compile"...
    summary: str            # the verdict, one line
    use_code: str           # the same path written as code
    faster: bool            # whether it is AutoKernel's (faster than PyTorch's best by more than the noise)


def compare(model: nn.Module, inputs: tuple, optimized_dir: str | Path | None, *, on_gpu: bool,
            compile_backend: str | None = INDUCTOR, policy: str = MEASURED, overhead: bool = False,
            log: Callable[[str], None] = lambda line: None, drops: Drops | None = None,
            max_autotune: bool = False) -> tuple[dict, dict]:
    """The end-to-end comparison as plain data (and the kernels' router summary), and the route tables measured
    (on a GPU; none elsewhere) as {kernel name: {"source_sha256", "device", "records"}}; the model is left unplugged.
    optimized_dir None compares PyTorch's own paths alone. What fails in our part is dropped into `drops`
    (containment.py), and the comparison still ends with a verdict."""
    def plug(policy: str, keep_examples: bool, exclude=(), on_failure=None):
        return plugin.router_of(plugin.plug_in(model, optimized_dir, policy=policy, keep_examples=keep_examples,
                                               exclude=exclude, on_failure=on_failure))

    try:
        compared = endtoend.compare(model, inputs, plug if optimized_dir is not None else None, on_gpu=on_gpu,
                                    compile_backend=compile_backend, policy=policy, overhead=overhead, log=log,
                                    drops=drops, max_autotune=max_autotune)
        router = plugin.router_of(model)
        records = compared.pop("records")
        tables = {kernel.name: {"source_sha256": kernel.source_sha256, "device": plugin.device_name(),
                                "records": [record.to_json() for record in records.get(kernel.name, [])]}
                  for kernel in router.kernels} if on_gpu and router is not None else {}
    finally:
        plugin.unplug(model)
        rewrites.undo_all(model)       # after the kernels: they went on before them (verify/rewrites.py)
    return compared, tables


def record_route_tables(manifest_path: Path, tables: dict) -> None:
    """Write route tables (as `compare` hands them back, checked record by record) into the manifest at manifest_path;
    ValueError, before anything is written, when they are not route tables."""
    manifest.write_route_tables(manifest_path, checked_tables(tables))


def checked_tables(tables) -> dict[str, tuple[str, str, list[manifest.RouteRecord]]]:
    """Route tables from a sandboxed child, whose JSON a kept kernel may have written: name -> (sha256, device,
    records); ValueError for anything else, so that the user's process reports it instead of a traceback."""
    if not isinstance(tables, dict):
        raise ValueError("route tables are not an object")
    checked = {}
    for name, table in tables.items():
        if not isinstance(table, dict) or not isinstance(table.get("source_sha256"), str) \
                or not isinstance(table.get("device"), str) or not isinstance(table.get("records"), list):
            raise ValueError(f"route table {name!r} is not {{source_sha256, device, records}}")
        try:
            records = [manifest.RouteRecord.from_json(record) for record in table["records"]]
        except (AttributeError, TypeError) as exc:
            raise ValueError(f"route table {name!r} holds a record that is not one ({exc})") from None
        checked[name] = (table["source_sha256"], table["device"], records)
    return checked


def runnable(model: nn.Module, optimized_dir: str | Path, verdict: dict, inputs: tuple | None = None) -> nn.Module:
    """The model to run on the verdict's path (plugged in and compiled as it says, rewritten where the verdict's path
    ran rewritten: its batch norms folded, its linears concatenated, each found on `inputs`), with its Choice
    attached."""
    variant = verdict["use"]
    name, ours, mode = VARIANTS[variant]
    for kind in rewrites.KINDS:
        if ours and verdict.get(kind.report_key):
            if inputs is None:
                raise ValueError(f"the verdict's path runs with {kind.name}, which is found on a forward: pass the "
                                 "sample inputs")
            kind.apply(model, inputs)
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
