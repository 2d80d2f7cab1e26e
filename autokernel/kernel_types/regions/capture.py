"""Captures a model as ATen graphs with every value's shape, strides and dtype and the source line that made it.

torch.compile's front end (Dynamo) traces the model's forward on the user's inputs, breaking the
graph where it must; each graph it hands its backend is traced again into ATen ops (make_fx,
functionalized, on fake tensors of static shapes), with each node's stack trace kept from the
model's own code. These are the ops PyTorch eager dispatches, not Inductor's decompositions, so a
region's reference runs exactly PyTorch's kernels. The same `aten_graph` is what the routing
backend (autokernel/routing/regions/routing.py) runs on the graphs of a compiled model, so a region found
here is found there again, op for op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


@dataclass(frozen=True)
class SourceLine:
    """One line of the model's Python source that a region's ops came from."""
    file: str
    line: int
    function: str
    code: str

    def show(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line} ({self.function}): {self.code}"


@dataclass
class CapturedGraph:
    """One graph of the model as ATen ops; input_names names each placeholder as the model does (x, lin.weight)."""
    module: torch.fx.GraphModule
    input_names: list[str]
    index: int = 0
    notes: list[str] = field(default_factory=list)


def source_name(placeholder: str) -> str:
    """Dynamo's name for a graph input as the model writes it: l_self_modules_lin_parameters_weight_ -> lin.weight."""
    name = re.sub(r"^[lL]_", "", placeholder).rstrip("_")
    name = re.sub(r"_(modules|parameters|buffers)_", ".", name)
    head, _, rest = name.partition(".")
    return rest if rest and head in ("self", "s", "model", "module") else name


def aten_graph(gm: torch.fx.GraphModule, example_inputs, *, fake: bool = True) -> torch.fx.GraphModule:
    """A Dynamo graph traced into functional ATen ops at static shapes, each node keeping its source's stack trace.

    fake traces on fake tensors (nothing runs); otherwise on the real inputs, so that the graph's
    constants are real tensors and the graph module can run (the routing backends')."""
    def run(*args):
        return torch.fx.Interpreter(gm).run(*args)

    traced = torch.func.functionalize(run, remove="mutations")
    if not fake:
        with fx_traceback.preserve_node_meta():
            return _without_dead_code(make_fx(traced, record_stack_traces=True)(*example_inputs))
    fake_mode = FakeTensorMode(static_shapes=True, allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(value, static_shapes=True) if isinstance(value, torch.Tensor) else value
             for value in example_inputs]
    with fx_traceback.preserve_node_meta(), fake_mode:
        return _without_dead_code(make_fx(traced, record_stack_traces=True)(*fakes))


def _without_dead_code(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Values nothing reads (a view the model made and dropped) would otherwise look like a region's outputs."""
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


def placeholder_names(gm: torch.fx.GraphModule) -> list[str]:
    return [source_name(node.name) for node in gm.graph.nodes if node.op == "placeholder"]


def capture(model: nn.Module, inputs: tuple) -> list[CapturedGraph]:
    """The model's forward on these inputs as ATen graphs (one per graph Dynamo made), without running it compiled."""
    graphs: list[CapturedGraph] = []

    def recorder(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(CapturedGraph(aten_graph(gm, example_inputs), placeholder_names(gm), len(graphs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=recorder, dynamic=False)(*inputs)
    finally:
        torch._dynamo.reset()
    return graphs


def source_lines(node: torch.fx.Node) -> list[SourceLine]:
    """The model's own source line behind a node: the last frame of its stack trace outside torch itself."""
    trace = node.meta.get("stack_trace") or ""
    lines = trace.splitlines()
    found = []
    for index, text in enumerate(lines):
        match = _FRAME.search(text)
        if match and "/torch/" not in match["file"] and index + 1 < len(lines):
            found.append(SourceLine(match["file"], int(match["line"]), match["function"], lines[index + 1].strip()))
    return found[-1:]
