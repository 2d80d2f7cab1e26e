"""Partitions a captured ATen graph into regions: the largest connected pieces one generated kernel can compute.

Each fusible op (ops.py: pointwise, reduction, normalization, scan, indexing, pooling, and the
views between them) joins the ops it reads from and the ops that read it, so a region is a connected
component of fusible ops between barriers (library calls, attention, random ops, the graph's
inputs). Then:
  - a library call (a GEMM, a convolution) whose every reader is in one region, and which reads
    nothing computed there, becomes that region's head: GEMM -> sigmoid -> row sum is one region
    whose output is the [M, 1] sum, never the [M, N] product, and convolution -> batch norm -> ReLU
    one whose output is the activation (one head per region, as a library call's epilogue is);
  - a convolution that heads no region is a region of its own (a GEMM alone is the menu's matmul);
  - views that only feed one region (a weight's transpose before its GEMM) move into it, so the
    region reads the weight as the model holds it;
  - a region of views alone computes nothing and is dropped, and so is one that reads no tensor (a causal mask
    made from arange: a constant of the shapes);
  - what the menu of kernel types covers stays the menu's: the ops of a module a type replaces
    whole (`excluded`, given by the plan: a gated MLP, a rotary, a norm module), and a region
    that is one op a type counts on its own (a lone softmax, sum or GEMM: `claimed`).
A region's definition (graph.py) names each input after the model's tensor (x, weight) and keeps
its outputs: the values read outside it. Identical definitions anywhere in the model are one region
with several instances (a repeated layer).
"""

from __future__ import annotations

import keyword
import operator
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import torch

from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.capture import CapturedGraph, SourceLine, source_lines
from autokernel.kernel_types.regions.graph import RegionDefinition, RegionInput, RegionNode, encode, layout_of
from autokernel.kernel_types.regions.inputs import infer_domains


@dataclass
class Found:
    """One region as found in one graph: its definition, the fx nodes it covers and what it reads there."""
    definition: RegionDefinition
    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]            # the fx values bound to the definition's inputs, in order
    outputs: list[torch.fx.Node]
    sources: list[SourceLine]
    module_paths: list[str]
    kinds: list[str]


@dataclass
class Partition:
    """The regions of one captured graph, and the components left to the menu or dropped, with why."""
    found: list[Found] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def module_path(stack_key: str) -> str:
    """Dynamo's nn_module_stack path as the model names the module: L['self'].layers[0].mlp -> layers.0.mlp."""
    path = re.sub(r"^L\['[^']+'\]\.?", "", stack_key)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return re.sub(r"\['([^']+)'\]", r".\1", path).strip(".")


def node_module_paths(node: torch.fx.Node) -> list[str]:
    """The modules a node ran in, outermost first: "" (the model itself), then each submodule's path."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = [module_path(value[0] if isinstance(value, tuple) else key) for key, value in stack.items()]
    return [""] + [path for path in paths if path]


def partition(captured: CapturedGraph, *, excluded: Callable[[str], bool] = lambda path: False,
              claimed: Callable[[torch.fx.Node], bool] = lambda node: False) -> Partition:
    """The regions of one graph. excluded(module path) keeps a module's ops out of regions; claimed(node) says a
    one-op component is the menu's."""
    graph = captured.module.graph
    calls = [n for n in graph.nodes if n.op == "call_function"]
    kind = {n: ops.kind(n.target) for n in calls}
    for node in calls:
        if kind[node] != ops.OTHER and any(excluded(path) for path in node_module_paths(node)):
            kind[node] = ops.OTHER
        # A result of a barrier's tuple (attention's output, say) is the barrier's: a region reads it as an input.
        if node.target is operator.getitem and kind.get(node.args[0]) in (ops.OTHER, *ops.HEADS, None):
            kind[node] = ops.OTHER
    fusible = {n for n in calls if kind[n] not in (ops.OTHER, *ops.HEADS)}
    parent = {n: n for n in fusible}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def union(a, b):
        parent[find(a)] = find(b)

    for node in fusible:
        for source in node.all_input_nodes:
            if source in fusible:
                union(node, source)
    members: dict = defaultdict(set)
    for node in fusible:
        members[find(node)].add(node)
    order = {node: index for index, node in enumerate(graph.nodes)}
    _split_cycles(members, order)
    component = {node: root for root, group in members.items() for node in group}
    _adopt_heads(calls, kind, component, members, order)
    for conv in (n for n in calls if kind[n] == ops.CONV and n not in component):
        members[conv], component[conv] = {conv}, conv
    _adopt_feeding_views(calls, kind, component, members)
    _split_cycles(members, order)
    for group in members.values():
        _trim_output_views(group)
    result = Partition()
    for group in members.values():
        nodes = sorted(group, key=order.__getitem__)
        compute = [n for n in nodes if kind[n] != ops.VIEW]
        if not compute:
            continue
        if len(compute) == 1 and claimed(compute[0]):
            result.skipped.append(f"{compute[0].name}: left to the menu's kernel type")
            continue
        try:
            result.found.append(_found(captured, nodes, kind))
        except ValueError as why:
            result.skipped.append(f"{', '.join(n.name for n in compute)}: {why}")
    return result


def _adopt_heads(calls, kind, component, members, order) -> None:
    for head in (n for n in calls if kind[n] in ops.HEADS):
        readers = list(head.users)
        roots = {component.get(reader) for reader in readers}
        if len(roots) != 1 or None in roots:
            continue
        root = roots.pop()
        group = members[root]
        if any(kind[n] in ops.HEADS for n in group) or any(source in group for source in head.all_input_nodes):
            continue
        if _late(group | {head}, order):        # the head reads what the region computes, through other ops
            continue
        group.add(head)
        component[head] = root


def _trim_output_views(group: set) -> None:
    """Views at the region's edge (read only outside it) stay outside: the region returns what they view, one
    tensor where Inductor would return several views of one buffer (q, k and v), which the judge refuses."""
    trimmed = True
    while trimmed:
        trimmed = False
        for node in list(group):
            if (ops.aliases(node.target) and node.args and node.args[0] in group
                    and all(user not in group for user in node.users)):
                group.discard(node)
                trimmed = True


def _late(group: set, order: dict) -> set:
    """The group's nodes that read, through nodes outside it, a value the group computes: one kernel cannot
    compute them with the rest (it would wait on its own output)."""
    downstream: set = set()
    late: set = set()
    first = min(order[n] for n in group)
    for node in list(order)[first:]:          # order: the graph's nodes in graph order
        sources = node.all_input_nodes
        if node in group:
            if any(s in downstream or s in late for s in sources):
                late.add(node)
        elif any(s in group or s in downstream for s in sources):
            downstream.add(node)
    return late


def _split_cycles(members: dict, order: dict) -> None:
    """Split every component that a path through other ops leaves and re-enters, until none does."""
    pending = list(members)
    while pending:
        root = pending.pop()
        group = members.get(root)
        if not group:
            continue
        late = _late(group, order)
        if not late:
            continue
        del members[root]
        for part in (group - late, late):
            for piece in _connected(part):
                new_root = min(piece, key=order.__getitem__)
                members[new_root] = piece
                pending.append(new_root)


def _connected(nodes: set) -> list[set]:
    """The connected pieces of a set of nodes, by the edges between them."""
    pieces, seen = [], set()
    for start in nodes:
        if start in seen:
            continue
        piece, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node in piece:
                continue
            piece.add(node)
            stack += [n for n in (*node.all_input_nodes, *node.users) if n in nodes and n not in piece]
        seen |= piece
        pieces.append(piece)
    return pieces


def _adopt_feeding_views(calls, kind, component, members) -> None:
    """A component of views alone whose every reader is in one other component joins it."""
    for root, group in list(members.items()):
        if any(kind[n] != ops.VIEW for n in group) or root not in members:
            continue
        readers = {component.get(user) for n in group for user in n.users if user not in group}
        if len(readers) == 1 and None not in readers:
            target = readers.pop()
            members[target] |= group
            for n in group:
                component[n] = target
            del members[root]


def _found(captured: CapturedGraph, nodes: list[torch.fx.Node], kind: dict) -> Found:
    inside = set(nodes)
    placeholders = {n: name for n, name in zip((n for n in captured.module.graph.nodes if n.op == "placeholder"),
                                               captured.input_names)}
    inputs: list[torch.fx.Node] = []
    for node in nodes:
        for source in node.all_input_nodes:
            if source not in inside and source not in inputs:
                inputs.append(source)
    if not inputs:
        # A causal mask or positions made from arange: a constant of the model's shapes, nothing a kernel could be
        # judged on (the judge draws its inputs), and no work worth one.
        raise ValueError("it reads no tensor: its result depends only on the model's shapes")
    names: dict = {}
    taken: set[str] = set()
    region_inputs = []
    for source in inputs:
        value = source.meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"it reads {source.name}, which is not a tensor")
        names[source] = _fresh(_input_name(source, placeholders), taken)
        shape, stride, dtype = layout_of(value)
        region_inputs.append(RegionInput(names[source], shape, stride, dtype))
    region_nodes = []
    for index, node in enumerate(nodes):
        names[node] = f"n{index}"
        value = node.meta.get("val")
        shape, _, dtype = layout_of(value) if isinstance(value, torch.Tensor) else (None, None, None)
        region_nodes.append(RegionNode(names[node], ops.op_name(node.target), encode(list(node.args), names),
                                       {k: encode(v, names) for k, v in node.kwargs.items()}, shape, dtype))
    outputs = [n for n in nodes if any(user not in inside for user in n.users)]
    if not outputs or any(not isinstance(n.meta.get("val"), torch.Tensor) for n in outputs):
        raise ValueError("its results are not tensors read outside it")
    definition = RegionDefinition(region_inputs, region_nodes, [names[n] for n in outputs])
    infer_domains(definition)
    sources = list(dict.fromkeys(line for n in nodes for line in source_lines(n)))
    paths = sorted({node_module_paths(n)[-1] for n in nodes})
    return Found(definition, nodes, inputs, outputs, sources, paths,
                 sorted({kind[n] for n in nodes if kind[n] != ops.VIEW}))


def _input_name(source: torch.fx.Node, placeholders: dict) -> str:
    if source in placeholders:
        name = placeholders[source].rsplit(".", 1)[-1]
    elif source.op == "get_attr":
        name = "constant"
    else:       # a value computed outside: named alike wherever it comes from, so repeated layers are one region
        name = "x"
    name = re.sub(r"\W", "_", name).strip("_") or "x"
    return f"t_{name}" if name[0].isdigit() or keyword.iskeyword(name) else name


def _fresh(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in taken or candidate in ("torch", "triton", "tl"):
        suffix += 1
        candidate = f"{name}_{suffix}"
    taken.add(candidate)
    return candidate
