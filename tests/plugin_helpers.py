"""Helpers the plug-in tests share (tests/test_plugin.py, tests/test_plugin_coverage.py): an optimized_kernels
folder written from starters or stand-in sources, and the router's hit and fallback counts."""

import shutil
from pathlib import Path

import torch

from autokernel.core.paths import MANIFEST_NAME, starter_path
from autokernel.routing import plugin
from autokernel.routing.manifest import write_manifest


def write_optimized(folder: Path, kernels: dict, dtypes=("float32",), sources: dict | None = None) -> Path:
    """An optimized_kernels folder: kernel type -> verified shapes; the starter, or a source from `sources`."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = {}
    for rank, (kernel_type, shapes) in enumerate(kernels.items(), start=1):
        name = f"{rank}_{kernel_type}"
        source = (sources or {}).get(kernel_type)
        if source is None:
            shutil.copyfile(starter_path(kernel_type), folder / f"{name}.py")
        else:
            (folder / f"{name}.py").write_text(source)
        entries[name] = {"file": f"{name}.py", "kernel_type": kernel_type, "rank": rank, "shapes": shapes,
                         "dtypes": list(dtypes), "best_speedup_vs_pytorch": 1.0}
    write_manifest(folder / MANIFEST_NAME, entries)
    return folder


def kernel_stats(model) -> dict:
    return {k["kernel_type"]: k for k in plugin.router_of(model).summary()["kernels"]}


def one_forward_stats(model, inputs) -> dict:
    """(hits, fallbacks) per kernel type of one forward pass, after the routes were resolved by another."""
    with torch.no_grad():
        model(*inputs)
        plugin.router_of(model).reset_stats()
        model(*inputs)
    return {t: (s["hits"], s["fallbacks"]) for t, s in kernel_stats(model).items()}


def recording_backend() -> tuple[object, list[str]]:
    """A torch.compile backend that records the ops of every graph it gets, and the list it fills.

    It compiles with aot_eager: that traces through the ops' fake implementations, as inductor does,
    without inductor's C++ compile, which takes minutes on a CPU."""
    graph_ops: list[str] = []

    def backend(graph_module, example_inputs):
        graph_ops.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return torch._dynamo.lookup_backend("aot_eager")(graph_module, example_inputs)

    return backend, graph_ops


def guard_lines(model, inputs) -> int:
    """The guards Dynamo checks before each call of the model's compiled forward (lines of its guard tree; a model of
    its own class, whose forward Dynamo compiles as the frame it enters)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend="eager")
            compiled(*inputs)
            compiled(*inputs)
        entries = _debug_get_cache_entry_list(type(model).forward.__code__)
        assert len(entries) == 1
        return sum("+- " in line for line in str(entries[0].guard_manager).splitlines())
    finally:
        torch._dynamo.reset()
