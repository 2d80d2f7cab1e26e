"""A region as a kernel type: the registry entry the judge, the loop and verify read, made from its definition.

The judge's five stages run on it unchanged (bench.py): the reference is the region's definition run
op by op (graph.py), inputs are drawn at the model's shapes, strides and dtypes in each op's domain
(inputs.py), the adversarial cases are those its definition lists, and tolerances are the dtype's
(autokernel/judge/correctness.py). A region has one shape, the model's, since it is routed only at that
call (autokernel/routing/regions/routing.py): its smoke, sweep, determinism and timing cases all use it, it
has no edge shapes of its own, and it is judged in its own dtype only (KernelType.dtypes).

The reference's oracle is the definition run with float64 inputs and dtype arguments (float32 for
half types): correctness.reference_outputs passes upcast inputs, which the reference notices.
The fewest bytes a call must move count the outputs and the inputs read whole (an embedding table
or a sliced input may be read in part, so it counts nothing: the speed-of-light check must never
fail an honest kernel), and the FLOPs count the GEMMs and convolutions alone.
"""

from __future__ import annotations

import functools
import inspect
import math

import torch

from autokernel.kernel_types.base import Adversarial, KernelType
from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.graph import RegionDefinition, references, torch_dtype
from autokernel.kernel_types.regions.inputs import make_inputs
from autokernel.kernel_types.regions.record import Region


def make_reference(definition: RegionDefinition):
    """A function with the region's inputs as its parameters (annotated, so torch.library can read its schema)."""
    outputs = len(definition.outputs)
    returns = torch.Tensor if outputs == 1 else tuple[(torch.Tensor,) * outputs]
    parameters = [inspect.Parameter(item.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor)
                  for item in definition.inputs]
    signature = inspect.Signature(parameters, return_annotation=returns)
    declared = {item.name: torch_dtype(item.dtype) for item in definition.inputs}

    def reference(*args, **kwargs):
        bound = signature.bind(*args, **kwargs).arguments
        upcast = {value.dtype for name, value in bound.items()
                  if isinstance(value, torch.Tensor) and value.dtype != declared[name] and value.is_floating_point()}
        return definition.run(bound, oracle=upcast.pop() if len(upcast) == 1 else None)

    reference.__signature__ = signature
    reference.__annotations__ = {**{p.name: torch.Tensor for p in parameters}, "return": returns}
    reference.__name__ = reference.__qualname__ = definition.name
    reference.__doc__ = f"The region {definition.name}, op by op (autokernel/kernel_types/regions/graph.py)."
    return reference


def bytes_moved(definition: RegionDefinition) -> float:
    read_whole = _inputs_read_whole(definition)
    total = sum(math.prod(i.shape) * torch_dtype(i.dtype).itemsize for i in definition.inputs if i.name in read_whole)
    return float(total + sum(math.prod(n.shape) * torch_dtype(n.dtype).itemsize for n in definition.output_nodes()))


def _inputs_read_whole(definition: RegionDefinition) -> set[str]:
    """The inputs no op reads only in part (through views too)."""
    origin = {i.name: i.name for i in definition.inputs}
    partial = set()
    for node in definition.nodes:
        sources = {origin[name] for arg in node.args for name in references(arg) if name in origin}
        if ops.subsets(node.op):
            partial |= sources
        elif ops.kind(ops.resolve(node.op)) == ops.VIEW and len(sources) == 1:
            origin[node.name] = sources.pop()
    return {i.name for i in definition.inputs} - partial


def head_flops(definition: RegionDefinition) -> float:
    shapes = {i.name: i.shape for i in definition.inputs}
    shapes.update({n.name: n.shape for n in definition.nodes})
    total = 0.0
    for node in definition.nodes:
        if ops.kind(ops.resolve(node.op)) in ops.HEADS:
            args = [shapes.get(references(arg)[0]) if references(arg) else [] for arg in node.args]
            total += ops.head_flops(node.op, args, node.shape, node.args)
    return total


def kernel_type(region: Region) -> KernelType:
    definition = region.definition
    shape = region.shape()
    make = functools.partial(_inputs, definition)
    moved, flops = bytes_moved(definition), head_flops(definition)
    source = (f"The model's PyTorch source this region covers:\n{region.source_text()}\n\n"
              f"Its ATen ops (the reference runs exactly these):\n{aten_listing(definition)}")
    return KernelType(
        name=definition.name, reference=make_reference(definition), make_inputs=make,
        smoke_shape=shape, sweep=[shape], cpu_sweep=[shape], edge_shapes=[], cpu_edge_shapes=[], timing_shape=shape,
        adversarial=[Adversarial(case, shape, functools.partial(_inputs, definition, case=case),
                                 f"{case}, within each input's domain") for case in definition.adversarial],
        bytes_moved=lambda s, e: moved, flops=lambda s: flops, description=region.describe(),
        matrix=flops > 0, dtypes=(definition.dtype,), source=source)


def _inputs(definition: RegionDefinition, shape, dtype, gen, device, case: str | None = None) -> dict:
    return make_inputs(definition, gen, device, case)


def aten_listing(definition: RegionDefinition) -> str:
    """The definition as readable lines: `n2 = aten.sum.dim_IntList(n1, [1], True)  # (64, 1) float32`."""
    lines = [f"inputs: {', '.join(f'{i.name} {tuple(i.shape)} {i.dtype} ({i.domain})' for i in definition.inputs)}"]
    for node in definition.nodes:
        args = ", ".join([_show(arg) for arg in node.args] + [f"{k}={_show(v)}" for k, v in node.kwargs.items()])
        layout = f"  # {tuple(node.shape)} {node.dtype}" if node.shape is not None else ""
        lines.append(f"{node.name} = {node.op}({args}){layout}")
    lines.append(f"return {', '.join(definition.outputs)}")
    return "\n".join(lines)


def _show(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(_show, value)) + "]"
    if isinstance(value, dict):
        return str(next(iter(value.values())))
    return repr(value)
