"""Inputs for a region's judge: at the model's shapes, strides and dtypes, with values in each op's domain.

Every input has a domain (ops.py): the values its readers are defined on. `infer_domains` reads
them from the region's ops (a log's or sqrt's input positive, a divisor non-zero, an embedding's
indices below its table's rows, reached through views too), taking the narrowest where readers
differ. Values are then drawn per domain: standard normal for any real, log-normal for positive
ones, uniform in (-0.9, 0.9) for asin's, and so on; integer indices uniform over their range.

The adversarial cases (the judge's stability stage) stay in each domain too:
  - "wide range": magnitudes up to about 100 (positive: 1e-2 to 1e2), which overflow a float16
    accumulator or an exp without its max subtracted; plain integers (positions) up to 2^15;
  - "tiny values": magnitudes about 1e-3, where an absolute tolerance alone would pass anything;
  - "constant lines": every line along the last dim one value: ties for max and argmax, zero
    variance for a norm;
  - "all negative": real inputs all below -1: a max that starts from 0 is wrong;
  - "index extremes": indices only 0 and the last valid one.
A case is kept for a region only where PyTorch's own result on it is finite (`usable_cases`).
"""

from __future__ import annotations

import math

import torch

from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.graph import RegionDefinition, RegionInput, references, torch_dtype

INDEX, INTEGER, BOOLEAN = "index", "integer", "boolean"
CASES = ("wide range", "tiny values", "constant lines", "all negative", "index extremes")
# Narrowest first: where readers ask for different domains, the first that satisfies them all.
_NARROWING = {frozenset({ops.UNIT, ops.POSITIVE}): ops.PROBABILITY, frozenset({ops.UNIT, ops.NONZERO}): ops.PROBABILITY,
              frozenset({ops.UNIT, ops.AT_LEAST_ONE}): ops.PROBABILITY}
_ORDER = [ops.PROBABILITY, ops.AT_LEAST_ONE, ops.UNIT, ops.POSITIVE, ops.NONZERO, ops.ABOVE_MINUS_ONE, ops.REAL]
# Integer arguments that index another argument: packet -> (index argument, data argument, the data's dim
# argument or a fixed dim).
# Ops whose values are some of their first argument's (picked, copied, repeated): what bounds or restricts their
# values bounds the input they came from. BERT's token types reach their embedding through a gather: without this
# their ids were drawn past its 2 rows (an IndexError here, a device-side assert on a GPU).
_SAME_VALUES = {"gather", "index_select", "index", "take", "clone", "_to_copy", "contiguous", "expand", "repeat",
                "embedding", "lift_fresh_copy", "alias"}
_INDEXERS = {"embedding": (1, 0, 0), "gather": (2, 0, "dim"), "index_select": (2, 0, "dim"),
             "take_along_dim": (1, 0, "dim"), "scatter": (2, 0, "dim"), "scatter_add": (2, 0, "dim"),
             "index_add": (2, 0, "dim"), "index_copy": (2, 0, "dim")}


def infer_domains(definition: RegionDefinition) -> None:
    """Set each input's domain (and an index's bound) from the ops that read it, in place."""
    shapes = {i.name: i.shape for i in definition.inputs}
    shapes.update({n.name: n.shape for n in definition.nodes})
    origin = {i.name: i.name for i in definition.inputs}       # value -> the input it is a view of
    wanted: dict[str, set[str]] = {i.name: set() for i in definition.inputs}
    bounds: dict[str, int] = {}
    for node in definition.nodes:
        keeps_values = ops.kind(ops.resolve(node.op)) == ops.VIEW or ops.packet(node.op) in _SAME_VALUES
        if keeps_values and node.args and references(node.args[0]):
            source = origin.get(references(node.args[0])[0])
            if source is not None:
                origin[node.name] = source
        for index, arg in enumerate(node.args):
            domain = ops.argument_domain(node.op, index)
            for name in references(arg):
                if domain and name in origin:
                    wanted[origin[name]].add(domain)
        _note_indices(node, shapes, origin, bounds)
    for item in definition.inputs:
        dtype = torch_dtype(item.dtype)
        if dtype == torch.bool:
            item.domain = BOOLEAN
        elif not dtype.is_floating_point:
            item.domain, item.index_bound = (INDEX, bounds[item.name]) if item.name in bounds else (INTEGER, None)
        else:
            item.domain = narrowest(wanted[item.name])


def _note_indices(node, shapes: dict, origin: dict, bounds: dict) -> None:
    name = ops.packet(node.op)
    if name == "index" and len(node.args) >= 2 and isinstance(node.args[1], list):
        data = references(node.args[0])
        for position, arg in enumerate(node.args[1]):
            for ref in references(arg):
                if ref in origin and data and shapes.get(data[0]):
                    _bound(bounds, origin[ref], shapes[data[0]][position])
        return
    if name not in _INDEXERS:
        return
    index_arg, data_arg, dim = _INDEXERS[name]
    if len(node.args) <= max(index_arg, data_arg):
        return
    if dim == "dim":
        dim = node.args[1] if len(node.args) > 1 and isinstance(node.args[1], int) else node.kwargs.get("dim", 0)
    data = references(node.args[data_arg])
    for ref in references(node.args[index_arg]):
        if ref in origin and data and shapes.get(data[0]):
            _bound(bounds, origin[ref], shapes[data[0]][dim])


def _bound(bounds: dict, name: str, size: int) -> None:
    bounds[name] = min(bounds.get(name, size), size)


def narrowest(domains: set[str]) -> str:
    domains = set(domains) - {ops.REAL}
    for pair, narrowed in _NARROWING.items():
        if pair <= domains:
            return narrowed
    return next((d for d in _ORDER if d in domains), ops.REAL)


# --------------------------------------------------------------------------- drawing values
def _uniform(shape, gen, device, low, high):
    return torch.rand(shape, generator=gen, device=device) * (high - low) + low


def _signed(shape, gen, device, magnitude):
    sign = torch.randint(0, 2, shape, generator=gen, device=device) * 2 - 1
    return sign * magnitude


def draw(item: RegionInput, shape, gen, device, case: str | None) -> torch.Tensor:
    """float32 (or integer, or bool) values for one input, in its domain, for a case (None: the ordinary one)."""
    dtype = torch_dtype(item.dtype)
    if item.domain == BOOLEAN:
        return torch.randint(0, 2, shape, generator=gen, device=device).bool()
    if item.domain in (INDEX, INTEGER):
        high = item.index_bound if item.domain == INDEX else 8
        if item.domain == INTEGER and case == "wide range":
            # A plain integer (a position, a count) up to a long context's, past what a byte or a half holds: a
            # kernel that reads only its low byte is wrong from 256 on. Kept only where PyTorch's result is finite.
            high = min(2 ** 15, torch.iinfo(dtype).max + 1)
        values = torch.randint(0, max(1, high), shape, generator=gen, device=device)
        if case == "index extremes":
            values = torch.where(values % 2 == 0, 0, max(0, high - 1))
        return values.to(dtype)
    wide, tiny = case == "wide range", case == "tiny values"
    d = item.domain
    if d == ops.POSITIVE:
        log_low, log_high = (-4.6, 4.6) if wide else (-9.2, -6.9) if tiny else (-1.0, 1.0)
        values = torch.exp(_uniform(shape, gen, device, log_low, log_high))
    elif d == ops.NONZERO:
        low, high = (0.01, 100.0) if wide else (1e-4, 1e-3) if tiny else (0.5, 2.0)
        values = _signed(shape, gen, device, _uniform(shape, gen, device, low, high))
    elif d == ops.UNIT:
        values = _uniform(shape, gen, device, -0.999, 0.999) if wide else \
            torch.randn(shape, generator=gen, device=device) * (1e-3 if tiny else 0.3)
        values = values.clamp(-0.999, 0.999)
    elif d == ops.PROBABILITY:
        values = _uniform(shape, gen, device, *((1e-4, 1 - 1e-4) if wide else (1e-4, 1e-3) if tiny else (0.05, 0.95)))
    elif d == ops.AT_LEAST_ONE:
        values = 1.0 + _uniform(shape, gen, device, 0.0, 100.0 if wide else 1e-3 if tiny else 2.0)
    elif d == ops.ABOVE_MINUS_ONE:
        values = _uniform(shape, gen, device, -0.99, 100.0) if wide else \
            torch.randn(shape, generator=gen, device=device).clamp(-0.9, 3.0) * (1e-3 if tiny else 0.5)
    else:
        values = torch.randn(shape, generator=gen, device=device) * (100.0 if wide else 1e-3 if tiny else 1.0)
        if case == "all negative":
            values = -values.abs() - 1.0
    if case == "constant lines" and values.dim() >= 1:
        values = values[..., :1].expand(values.shape).contiguous()
    return values.to(dtype)


def make_inputs(definition: RegionDefinition, gen: torch.Generator, device, case: str | None = None) -> dict:
    """Every input of the region, at its shape, strides and dtype, drawn in its domain."""
    made = {}
    for item in definition.inputs:
        values = draw(item, item.shape, gen, device, case)
        tensor = torch.empty_strided(item.shape, item.stride, dtype=values.dtype, device=device)
        tensor.copy_(values)
        made[item.name] = tensor
    return made


def overlapping(item: RegionInput) -> bool:
    """Whether an input's strides make elements share memory (an expanded tensor): the judge cannot fill it."""
    dims = sorted((stride, size) for size, stride in zip(item.shape, item.stride) if size > 1)
    span = 1
    for stride, size in dims:
        if stride < span:
            return True
        span = stride * size
    return False


def usable_cases(definition: RegionDefinition, device, seed: int = 0) -> list[str]:
    """The adversarial cases that fit the region: its PyTorch result on them is finite everywhere."""
    kept = []
    for case in CASES:
        if case == "index extremes" and not any(i.domain == INDEX for i in definition.inputs):
            continue
        if case == "all negative" and not any(i.domain == ops.REAL for i in definition.inputs):
            continue
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        with torch.no_grad():
            outputs = definition.run(make_inputs(definition, gen, device, case))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        if all(not o.is_floating_point() or bool(torch.isfinite(o).all()) for o in outputs):
            kept.append(case)
    return kept


def element_count(item: RegionInput) -> int:
    return math.prod(item.shape)


def settle_domains(definition: RegionDefinition, device, seed: int = 0) -> None:
    """Make sure ordinary inputs give a finite result; where the ops' domains did not suffice (a log of a sum),
    draw the real inputs positive, then in (0, 1). ValueError when nothing does."""
    floats = [i for i in definition.inputs if i.domain == ops.REAL]
    for fallback in (None, ops.POSITIVE, ops.PROBABILITY):
        if fallback is not None:
            if not floats:
                break
            for item in floats:
                item.domain = fallback
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        with torch.no_grad():
            outputs = definition.run(make_inputs(definition, gen, device))
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        if all(not o.is_floating_point() or bool(torch.isfinite(o).all()) for o in outputs):
            return
    raise ValueError("its PyTorch result is not finite on inputs drawn from its ops' domains")
