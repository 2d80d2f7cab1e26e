"""Finds a region's computation in a captured ATen graph, and puts a kernel in its place.

A region is found where the graph computes exactly its definition: the same ops with the same
arguments, the same shapes and dtypes, and inputs of the same layout (strides included: the
kernel was judged on them). The search starts from each node that could be the region's first
output and walks back through the arguments, binding the definition's nodes and inputs to the
graph's (`find`); a match whose inner values are read elsewhere in the graph is passed over, since
replacing it would not remove them. `replace` inserts one call of the kernel where the region
was, taking the bound inputs in the definition's order, and routes the outputs' readers to its
results, copied into the original strides where the kernel returned others; matches that feed one
another (a region repeated in a chain) are replaced together, each reading what replaced the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.fx.passes.tools_common import legalize_graph

from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.graph import RegionDefinition, encode


@dataclass
class Match:
    nodes: dict[str, torch.fx.Node]          # definition node name -> graph node
    inputs: list[torch.fx.Node]              # graph values bound to the definition's inputs, in order
    outputs: list[torch.fx.Node]


def _layout(node) -> tuple | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor):
        return None
    return list(value.shape), list(value.stride()), str(value.dtype).removeprefix("torch.")


class _Matcher:
    def __init__(self, definition: RegionDefinition):
        self.definition = definition
        self.by_name = {node.name: node for node in definition.nodes}
        self.input_index = {item.name: index for index, item in enumerate(definition.inputs)}
        self.nodes: dict[str, torch.fx.Node] = {}
        self.inputs: dict[str, torch.fx.Node] = {}

    def node(self, name: str, target: torch.fx.Node) -> bool:
        if name in self.nodes:
            return self.nodes[name] is target
        if target in self.nodes.values() or target.op != "call_function":
            return False
        region_node = self.by_name[name]
        try:
            if ops.op_name(target.target) != region_node.op:
                return False
        except ValueError:
            return False
        layout = _layout(target)
        if region_node.shape is not None and (layout is None or layout[0] != region_node.shape
                                              or layout[2] != region_node.dtype):
            return False
        if len(target.args) != len(region_node.args) or set(target.kwargs) != set(region_node.kwargs):
            return False
        self.nodes[name] = target
        return all(self.argument(r, t) for r, t in zip(region_node.args, target.args)) and \
            all(self.argument(region_node.kwargs[k], target.kwargs[k]) for k in region_node.kwargs)

    def argument(self, region_arg, target_arg) -> bool:
        if isinstance(region_arg, dict) and "ref" in region_arg:
            if not isinstance(target_arg, torch.fx.Node):
                return False
            name = region_arg["ref"]
            if name in self.input_index:
                return self.bind_input(name, target_arg)
            return self.node(name, target_arg)
        if isinstance(region_arg, list):
            return isinstance(target_arg, (list, tuple)) and len(region_arg) == len(target_arg) and \
                all(self.argument(r, t) for r, t in zip(region_arg, target_arg))
        if isinstance(target_arg, torch.fx.Node):
            return False
        try:
            return encode(target_arg, {}) == region_arg
        except ValueError:
            return False

    def bind_input(self, name: str, target: torch.fx.Node) -> bool:
        if name in self.inputs:
            return self.inputs[name] is target
        item = self.definition.inputs[self.input_index[name]]
        if _layout(target) != (item.shape, item.stride, item.dtype):
            return False
        self.inputs[name] = target
        return True


def find(graph: torch.fx.Graph, definition: RegionDefinition, device: str | None = None) -> list[Match]:
    """Every place the graph computes the region on `device` (a device type; default: the GPU where there is one),
    none overlapping another. A region computed elsewhere is passed over: a Triton kernel takes no CPU tensor,
    where a model's graph can run ops on the CPU beside the GPU's (session 18, H200: nn.TransformerEncoder's
    padded fast path, "Pointer argument cannot be accessed from Triton (cpu tensor?)")."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    first = definition.outputs[0]
    first_op = next(node.op for node in definition.nodes if node.name == first)
    matches, used = [], set()
    for candidate in graph.nodes:
        if candidate.op != "call_function" or candidate in used:
            continue
        try:
            if ops.op_name(candidate.target) != first_op:
                continue
        except ValueError:
            continue
        matcher = _Matcher(definition)
        if not matcher.node(first, candidate):
            continue
        if not all(_match_output(matcher, name, graph) for name in definition.outputs[1:]):
            continue
        if len(matcher.nodes) != len(definition.nodes) or len(matcher.inputs) != len(definition.inputs):
            continue
        covered = set(matcher.nodes.values())
        outputs = [matcher.nodes[name] for name in definition.outputs]
        if _devices([*matcher.inputs.values(), *covered]) != {device}:
            continue
        inner = covered - set(outputs)
        if covered & used or any(user not in covered for node in inner for user in node.users):
            continue
        used |= covered
        matches.append(Match(dict(matcher.nodes), [matcher.inputs[item.name] for item in definition.inputs],
                             outputs))
    return matches


def _devices(nodes) -> set[str]:
    return {value.device.type for node in nodes if isinstance(value := node.meta.get("val"), torch.Tensor)}


def _match_output(matcher: _Matcher, name: str, graph: torch.fx.Graph) -> bool:
    """Bind a further output, which the first output's walk back may not have reached (two results)."""
    if name in matcher.nodes:
        return True
    op = next(node.op for node in matcher.definition.nodes if node.name == name)
    for candidate in graph.nodes:
        if candidate.op == "call_function" and candidate not in matcher.nodes.values():
            try:
                if ops.op_name(candidate.target) != op:
                    continue
            except ValueError:
                continue
            saved = (dict(matcher.nodes), dict(matcher.inputs))
            if matcher.node(name, candidate):
                return True
            matcher.nodes, matcher.inputs = saved
    return False


def as_layout(tensor: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """The tensor with these strides: itself when it has them, else a copy laid out so."""
    if list(tensor.stride()) == list(stride) or tensor.numel() <= 1:
        return tensor
    out = torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype, device=tensor.device)
    out.copy_(tensor)
    return out


def replace(gm: torch.fx.GraphModule, matches: list[Match], kernel: Callable, outputs: int) -> None:
    """The kernel in each match's place; after the last replacement, `finish` puts the graph in order.

    Matches found together may chain (eight Linear + ReLU in a row: one match's output is the next one's input),
    so an input that an earlier replacement took away is read from the value that replaced it."""
    substitutes: dict[torch.fx.Node, torch.fx.Node] = {}
    for match in matches:
        inputs = [substitutes.get(node, node) for node in match.inputs]
        substitutes.update(_replace_one(gm.graph, match, inputs, kernel, outputs))


def _replace_one(graph: torch.fx.Graph, match: Match, inputs: list, kernel: Callable, outputs: int) -> dict:
    """One match replaced; returns each of its outputs -> the value now in its place."""
    with graph.inserting_before(match.outputs[0]):
        call = graph.call_function(kernel, tuple(inputs))
        results = [call] if outputs == 1 else [graph.call_function(_item, (call, i)) for i in range(outputs)]
        laid = [graph.call_function(as_layout, (result, _layout(old)[1])) for result, old in zip(results, match.outputs)]
    for old, new in zip(match.outputs, laid):
        # the same value, laid out as before: a region read from it (the next block of a CNN) is still found there
        new.meta["val"] = old.meta.get("val")
        old.replace_all_uses_with(new)
    position = {node: index for index, node in enumerate(graph.nodes)}
    for node in sorted(match.nodes.values(), key=lambda n: -position[n]):      # readers before what they read
        graph.erase_node(node)
    return dict(zip(match.outputs, laid))


def finish(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph in topological order again (the kernel calls were inserted at its first output), recompiled.
    legalize_graph makes new nodes: matches found before are stale after it."""
    gm = legalize_graph(gm)
    gm.recompile()
    return gm


def _item(values, index: int):
    return values[index]

