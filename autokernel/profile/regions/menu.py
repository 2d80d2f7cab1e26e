"""Which ops of a captured graph the menu of kernel types already counts: the regions leave them to it.

A one-op component whose op a menu type profiles (a lone softmax, sum or GEMM) is that type's job,
as the profiler plans it (autokernel/profile/classify.py), with the shape the type reads from the op
(Recognition.op_shape, asked here with the node's own arguments in place of a trace's). A region
that holds such an op (a GEMM at the head of an epilogue, a sum after a sigmoid) takes it from the
menu: `menu_call` names the menu's (type, shape) it takes, so the plan counts it once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autokernel.kernel_types import TYPES
from autokernel.kernel_types.regions import ops

_OP_TYPES = {op: kt.name for kt in TYPES.values() for op in kt.profiled_ops}
_MENU_FUNCTIONS = {function for kt in TYPES.values() for function in kt.route.functions}


@dataclass
class _RecordedCall:
    """A graph node dressed as the torch profiler's event for one op: its name and every argument's value."""
    name: str
    concrete_inputs: list


def _arguments(node: torch.fx.Node) -> tuple[list, list[list[int]]]:
    """The op's arguments in schema order (defaults filled in), tensors as None, and each one's shape ([] if none)."""
    schema = node.target._schema
    values, shapes = [], []
    for index, argument in enumerate(schema.arguments):
        if index < len(node.args):
            value = node.args[index]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        else:
            value = argument.default_value if argument.has_default_value() else None
        if isinstance(value, torch.fx.Node):
            tensor = value.meta.get("val")
            shapes.append(list(tensor.shape) if isinstance(tensor, torch.Tensor) else [])
            values.append(None)
        else:
            shapes.append([])
            values.append(value)
    return values, shapes


def menu_call(node: torch.fx.Node) -> tuple[str, dict] | None:
    """(menu type, its shape) of an op the menu plans on its own, or None."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    name = f"aten::{ops.packet(ops.op_name(node.target))}"
    kernel_type = _OP_TYPES.get(name)
    read = TYPES[kernel_type].recognise.op_shape if kernel_type else None
    if read is None:
        return None
    values, shapes = _arguments(node)
    try:
        shape = read(name, _RecordedCall(name, values), shapes)
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    return (kernel_type, shape) if shape else None


def _menu_function(node: torch.fx.Node) -> bool:
    """Whether the node came from a torch function the menu routes whole (F.cross_entropy: its log-softmax and its
    loss are one menu kernel), as Dynamo recorded the function the model called."""
    stack = node.meta.get("source_fn_stack") or []
    return bool(stack) and stack[-1][1] in _MENU_FUNCTIONS


def claimed(node: torch.fx.Node) -> bool:
    """Whether a one-op component is the menu's: an op a type profiles, or a piece of a function a type routes."""
    return menu_call(node) is not None or _menu_function(node)
