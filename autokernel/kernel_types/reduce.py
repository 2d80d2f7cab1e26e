"""reduce: sum, mean, max or min of a tensor viewed as (O, R, I), over R, and max or min with the index of the
first extreme (torch.max / torch.min(x, dim), ops max_dim and min_dim). Inputs, shapes and the cases a wrong
identity, a half-precision accumulator or a tie broken the wrong way fails; aten::sum / mean / amax / amin /
max / min in a trace; torch.sum / mean / amax / amin / max / min and their Tensor methods routed, over any one
dim or run of adjacent dims (one dim for max and min with indices, as PyTorch takes them)."""

from __future__ import annotations

import functools
import math

import torch

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import Adversarial, KernelType, Reading, Recognition, Routing, Shape, \
    recorded_argument

REDUCE_OPS = ("sum", "mean", "max", "min", "max_dim", "min_dim")
WITH_INDICES = ("max_dim", "min_dim")      # return (values, int64 indices), as torch.max / torch.min(x, dim) do
_OPS = {"aten::sum": "sum", "aten::mean": "mean", "aten::amax": "max", "aten::amin": "min",
        "aten::max": "max", "aten::min": "min"}


def reduce_layout(s: Shape) -> tuple[int, int, int]:
    """(O, R, I) of a reduce shape: a tensor viewed as (outer, reduced, inner), reduced over R."""
    return int(s.get("O", 1)), int(s["R"]), int(s.get("I", 1))


def reduce_shape(outer: int, reduced: int, inner: int, op: str) -> Shape:
    return {"O": outer, "R": reduced, "I": inner, "op": op}


def reduce_call(outer: int, reduced: int, inner: int) -> tuple[tuple[int, ...], int]:
    """The tensor shape and dim a reduce kernel is called with for a layout: (O, R) over dim -1 when I
    is 1, (R, I) over dim 0 when O is 1 (the 2-D forms reduce kernels took before any dim could be
    reduced, so their files keep working), else (O, R, I) over dim 1. The router calls kernels so too."""
    if inner == 1:
        return (outer, reduced), -1
    if outer == 1:
        return (reduced, inner), 0
    return (outer, reduced, inner), 1


def reduce_inputs(s, dtype, gen, device, x_scale=1.0, x_offset=0.0):
    sizes, dim = reduce_call(*reduce_layout(s))
    x = (torch.randn(sizes, generator=gen, device=device) * x_scale + x_offset).to(dtype)
    return {"x": x, "dim": dim, "op": str(s.get("op", "sum"))}


def _nonfinite(s, dtype, gen, device):
    # max / min as torch.amax / amin: a nan anywhere in a reduced line makes it nan, an inf of
    # the op's own sign wins, and a line of nothing but the other inf stays that inf.
    inputs = reduce_inputs(s, dtype, gen, device)
    outer, reduced, inner = reduce_layout(s)
    x = inputs["x"].reshape(outer, reduced, inner)
    x[0, reduced // 2, 0] = float("nan")
    x[-1, :, -1] = float("-inf") if s.get("op") == "max" else float("inf")
    x[0, 1, inner - 1] = float("inf")
    x[0, 2, inner - 1] = float("-inf")
    x[outer - 1, 0, 0] = float("nan")
    x[outer - 1, 3, 0] = float("inf")
    return inputs


def _ties(s, dtype, gen, device):
    # Small integers, all below zero for a max (above for a min), so every line holds its extreme
    # several times, and every third line is one value all along R.
    op = str(s.get("op"))
    outer, reduced, inner = reduce_layout(s)
    x = torch.randint(-3, 4, (outer, reduced, inner), generator=gen, device=device).to(torch.float32)
    line = torch.arange(outer, device=device)[:, None] * inner + torch.arange(inner, device=device)
    x = torch.where((line % 3 == 0)[:, None, :], 1.0, x)
    x = x - 10.0 if op.startswith("max") else x + 10.0
    sizes, dim = reduce_call(outer, reduced, inner)
    return {"x": x.reshape(sizes).to(dtype), "dim": dim, "op": op}


def _nonfinite_indices(s, dtype, gen, device):
    # Where the index of a nan or an inf goes: the first of two nans, the first of a line of nans,
    # a nan after an inf of the op's own sign, the first of two such infs, and a line of nothing
    # but the other inf (index 0).
    inputs = reduce_inputs(s, dtype, gen, device)
    outer, reduced, inner = reduce_layout(s)
    x = inputs["x"].reshape(outer, reduced, inner)
    own = float("inf") if str(s.get("op")).startswith("max") else -float("inf")
    x[0, 9, 0] = x[0, 2, 0] = float("nan")
    x[1, :, 1] = float("nan")
    x[0, 1, 1], x[0, 7, 1] = own, float("nan")
    x[2, 3, 2] = x[2, 8, 2] = own
    x[-1, :, -1] = -own
    x[1, -1, 0] = float("nan")
    return inputs


def _output_elems(s):
    outer, _, inner = reduce_layout(s)
    return outer * inner


def _shapes(rows) -> list[Shape]:
    return [reduce_shape(*row) for row in rows]


# --------------------------------------------------------------------------- the layout both sides read
def reduction_layout(shape, dim) -> tuple[int, int, int] | str:
    """(outer, reduced, inner) of a reduction over `dim` of a tensor of this shape, the (O, R, I)
    layout the reduce kernel is judged on, or why it is not one.

    Any one dimension, or a run of adjacent ones (all of them when dim is None or ()), is one
    reduced axis of the tensor viewed as (O, R, I); dims with a gap between them are not. The
    profiler's plan asks this too (op_shape), so a reduction is planned as a job only in a form
    the router can run.
    """
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    if len(shape) == 0 or not all(isinstance(d, int) for d in dims):
        return "a reduction of a 0-d tensor, or over named dimensions"
    ndim = len(shape)
    if not all(-ndim <= d < ndim for d in dims):
        return "a reduction over a dimension out of range"
    reduced = sorted({d % ndim for d in dims}) or list(range(ndim))
    first, last = reduced[0], reduced[-1]
    if reduced != list(range(first, last + 1)):
        return "a reduction over dimensions that are not adjacent"
    return math.prod(shape[:first]), math.prod(shape[first:last + 1]), math.prod(shape[last + 1:])


def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    """The reduce job's shape, or None (left as "other") where the router could not run the call."""
    if not shapes[0] or recorded_argument(event, "dtype") is not None:
        return None         # sum(x, dtype=...): the router leaves a dtype argument to PyTorch
    dim, reduced = recorded_argument(event, "dim"), _OPS[op]
    if op in ("aten::max", "aten::min"):
        # One name, three forms: max(x), a full reduction as amax is; max.dim(x, dim, keepdim), values
        # and indices; max.other(x, y), elementwise (and the out= forms, which the router leaves to PyTorch).
        if len(shapes) == 1:
            dim = None
        elif len(shapes) == 3 and not shapes[1] and not shapes[2] and type(dim) is int:
            reduced += "_dim"
        else:
            return None
    layout = reduction_layout(shapes[0], dim)
    if isinstance(layout, str):
        return None
    return reduce_shape(*layout, reduced)


# --------------------------------------------------------------------------- the router
def _reduced_dims(input, dim) -> list[int]:
    dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % input.dim() for d in dims}) or list(range(input.dim()))


def read_reduction(op: str, input, dim=None, keepdim=False, *, dtype=None, out=None) -> Reading | str:
    # The signature of torch.sum / torch.mean and their Tensor methods; amax's and amin's have no
    # dtype, and their dim=() also means all dims.
    if dtype is not None or out is not None:
        return "a reduction with a dtype or out argument"
    layout = reduction_layout(tuple(input.shape), dim)
    if isinstance(layout, str):
        return layout
    return Reading(reduce_shape(*layout, op), (input,), functools.partial(_launch_reduction, op))


def _out_shape(input, dim, keepdim) -> list[int]:
    reduced = _reduced_dims(input, dim)
    return [1 if d in reduced else size for d, size in enumerate(input.shape) if keepdim or d not in reduced]


def _launch_reduction(op: str, fn, input, dim=None, keepdim=False, *, dtype=None, out=None):
    sizes, kernel_dim = reduce_call(*reduction_layout(tuple(input.shape), dim))
    return fn(input.reshape(sizes).contiguous(), kernel_dim, op).reshape(_out_shape(input, dim, keepdim))


_WHOLE = object()      # torch.max(x): no dim given
_RETURN_TYPES = {"max": torch.return_types.max, "min": torch.return_types.min}


def read_max_min(op: str, input, dim=_WHOLE, keepdim=_WHOLE, *, out=None, other=None) -> Reading | str:
    """torch.max / torch.min and their Tensor methods, in the forms they take: (x), amax's full reduction;
    (x, dim, keepdim=False), the values and indices over one dim; (x, other), elementwise, not a reduction."""
    if other is not None or isinstance(dim, torch.Tensor):
        return f"torch.{op} of two tensors: elementwise, not a reduction"
    if out is not None:
        return "a reduction with a dtype or out argument"
    if dim is _WHOLE:
        return read_reduction(op, input) if keepdim is _WHOLE else "a calling form the route does not read"
    if type(dim) is not int:
        return f"torch.{op} over a dim that is not one int"
    layout = reduction_layout(tuple(input.shape), dim)
    if isinstance(layout, str):
        return layout
    # A graph op has the reference's schema, one tensor out: the pair runs eagerly, torch.compile's is Inductor's.
    return Reading(reduce_shape(*layout, f"{op}_dim"), (input,), functools.partial(_launch_with_indices, op),
                   traceable=False)


def _launch_with_indices(op: str, fn, input, dim, keepdim=False):
    sizes, kernel_dim = reduce_call(*reduction_layout(tuple(input.shape), dim))
    values, indices = fn(input.reshape(sizes).contiguous(), kernel_dim, f"{op}_dim")
    out_shape = _out_shape(input, dim, bool(keepdim))
    return _RETURN_TYPES[op]((values.reshape(out_shape), indices.reshape(out_shape)))


_SUM, _MEAN = functools.partial(read_reduction, "sum"), functools.partial(read_reduction, "mean")
_MAX, _MIN = functools.partial(read_reduction, "max"), functools.partial(read_reduction, "min")
_MAX_DIM, _MIN_DIM = functools.partial(read_max_min, "max"), functools.partial(read_max_min, "min")

KERNEL_TYPE = KernelType(
    name="reduce",
    profiled_ops=frozenset(_OPS),
    description="sum, mean, max or min of a tensor viewed as (O, R, I) over R (any one dimension, or a "
                "run of adjacent ones); max and min are amax / amin (values only), max_dim and min_dim are "
                "torch.max / torch.min(x, dim): (values, int64 indices of the first extreme, or first nan)",
    reference=reference.reduce,
    make_inputs=reduce_inputs,
    smoke_shape=reduce_shape(4, 128, 8, "sum"),
    # Reduced last (I = 1), first (O = 1) and in the middle (KernelBench's (16, 256, 256) over dim 1).
    sweep=_shapes([
        (1, 4096, 1, "sum"), (1024, 1024, 1, "min_dim"), (4096, 4096, 1, "mean"), (1, 4096, 4096, "sum"),
        (1, 8192, 1024, "max"), (16, 256, 256, "sum"), (16, 256, 256, "max_dim"), (128, 1024, 128, "mean"),
        (64, 4096, 64, "min"), (8192, 8192, 1, "sum")]),
    cpu_sweep=_shapes([
        (1, 64, 1, "sum"), (4, 128, 1, "max"), (1, 16, 256, "sum"), (4, 32, 16, "mean"), (3, 50, 7, "min_dim"),
        (2, 64, 64, "max_dim"), (8, 33, 5, "sum"), (64, 64, 1, "min"), (3, 1024, 1, "mean")]),
    edge_shapes=_shapes([
        (1023, 1023, 1, "sum"), (17, 4097, 1, "max_dim"), (1, 1537, 1537, "mean"), (1, 4097, 3, "min_dim"),
        (7, 1023, 33, "sum"), (3, 1, 4097, "max"), (1, 1, 1, "sum"), (4096, 1, 1, "min"), (1, 4096, 1, "mean")]),
    cpu_edge_shapes=_shapes([
        (3, 1023, 1, "sum"), (2, 4097, 1, "max_dim"), (1, 1537, 3, "mean"), (1, 4097, 2, "min_dim"),
        (3, 37, 5, "sum"), (5, 1, 9, "max"), (1, 1, 1, "sum"), (7, 1, 1, "min_dim"), (1, 7, 1, "mean")]),
    timing_shape=reduce_shape(8192, 8192, 1, "sum"),
    adversarial=[
        Adversarial("all-negative values (max)", reduce_shape(16, 1024, 1, "max"),
                    lambda s, d, g, dev: reduce_inputs(s, d, g, dev, x_offset=-50.0),
                    "every value below zero: a max that starts from 0 is wrong"),
        Adversarial("all-positive values (min)", reduce_shape(4, 256, 8, "min"),
                    lambda s, d, g, dev: reduce_inputs(s, d, g, dev, x_offset=50.0),
                    "every value above zero: a min that starts from 0 is wrong"),
        Adversarial("nan and inf (max)", reduce_shape(4, 256, 8, "max"), _nonfinite,
                    "nan propagates, +inf wins, a line of -inf stays -inf"),
        Adversarial("nan and inf (min)", reduce_shape(4, 256, 8, "min"), _nonfinite,
                    "nan propagates, -inf wins, a line of +inf stays +inf"),
        Adversarial("tied maxima (max_dim)", reduce_shape(4, 256, 8, "max_dim"), _ties,
                    "every line holds its maximum several times and some are constant: the index is the "
                    "first one's; all values are below zero"),
        Adversarial("tied minima (min_dim)", reduce_shape(16, 64, 1, "min_dim"), _ties,
                    "lines along the contiguous dim, each holding its minimum several times: the first wins"),
        Adversarial("nan and inf (max_dim)", reduce_shape(4, 256, 8, "max_dim"), _nonfinite_indices,
                    "the first nan wins, even after +inf; of two +inf the first; a line of -inf is index 0"),
        Adversarial("nan and inf (min_dim)", reduce_shape(4, 256, 8, "min_dim"), _nonfinite_indices,
                    "the first nan wins, even after -inf; of two -inf the first; a line of +inf is index 0"),
        Adversarial("large values (sum)", reduce_shape(16, 1024, 1, "sum"),
                    lambda s, d, g, dev: reduce_inputs(s, d, g, dev, x_scale=1e2),
                    "sums of +-100: a float16 accumulator loses the result"),
        Adversarial("sums near float16's limit", reduce_shape(4, 1024, 8, "sum"),
                    lambda s, d, g, dev: reduce_inputs(s, d, g, dev, x_offset=60.0),
                    "1024 values near 60 sum to about 61440: a float16 accumulator, whose spacing there "
                    "is 32, rounds away most of every addition"),
        Adversarial("means near float16's limit", reduce_shape(4, 1024, 8, "mean"),
                    lambda s, d, g, dev: reduce_inputs(s, d, g, dev, x_offset=60.0),
                    "the mean of the same values: the sum must still be accumulated in float32"),
    ],
    # max_dim and min_dim also write an int64 index per output element.
    bytes_moved=lambda s, e: (math.prod(reduce_layout(s)) + _output_elems(s)) * e
    + (_output_elems(s) * 8 if s.get("op") in WITH_INDICES else 0),
    flops=lambda s: float(math.prod(reduce_layout(s))),
    recognise=Recognition(op_shape=op_shape),
    route=Routing(functions={
        torch.sum: _SUM, torch.Tensor.sum: _SUM, torch.mean: _MEAN, torch.Tensor.mean: _MEAN,
        torch.amax: _MAX, torch.Tensor.amax: _MAX, torch.amin: _MIN, torch.Tensor.amin: _MIN,
        torch.max: _MAX_DIM, torch.Tensor.max: _MAX_DIM, torch.min: _MIN_DIM, torch.Tensor.min: _MIN_DIM}),
)
