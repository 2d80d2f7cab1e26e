"""autokernel/kernel_types/reduce.py: shapes of the old form read as their layout, the 2-D input forms, and one rule
for which reductions the profiler plans and the router runs."""

from types import SimpleNamespace

import pytest
import torch

from autokernel import registry
from autokernel.kernel_types import reduce


@pytest.mark.parametrize("dims, planned", [
    ([2], {"O": 2 * 3, "R": 4, "I": 1}),      # trailing
    ([0], {"O": 1, "R": 2, "I": 3 * 4}),      # leading: a column reduction
    ([1], {"O": 2, "R": 3, "I": 4}),          # a middle dimension
    ([0, 1], {"O": 1, "R": 6, "I": 4}),       # a run of adjacent dims
    ([0, 2], None),                           # dims with a gap: the router cannot run it
])
@pytest.mark.parametrize("aten_op, op", [("aten::sum", "sum"), ("aten::mean", "mean"), ("aten::amax", "max"),
                                         ("aten::amin", "min")])
def test_a_reduction_is_planned_only_in_a_form_the_router_runs(dims, planned, aten_op, op):
    planned = None if planned is None else {**planned, "op": op}
    # sum and mean carry a dtype argument, amax and amin do not.
    concrete = ["", dims, False, None] if aten_op in ("aten::sum", "aten::mean") else ["", dims, False]
    event = SimpleNamespace(name=aten_op, concrete_inputs=concrete)
    assert reduce.op_shape(aten_op, event, [[2, 3, 4]]) == planned
    x = torch.zeros(2, 3, 4)
    reading = reduce.read_reduction(op, x, dims)
    assert isinstance(reading, str) == (planned is None)
    if planned is not None:
        assert reading.shape == planned


@pytest.mark.parametrize("old, new", [
    ({"M": 6, "N": 10, "dim": -1, "op": "max"}, {"O": 6, "R": 10, "I": 1, "op": "max"}),
    ({"M": 6, "N": 10, "dim": 0, "op": "sum"}, {"O": 1, "R": 6, "I": 10, "op": "sum"}),
])
def test_reduce_shapes_of_the_old_form_read_as_their_layout(old, new):
    # Plans and manifests written when only a leading or trailing dim could be reduced stay valid.
    reduce = registry.get("reduce")
    assert registry.canonical_shape("reduce", old) == new
    assert registry.canonical_shape("matmul", {"M": 1, "N": 2, "K": 3}) == {"M": 1, "N": 2, "K": 3}
    a, b = (reduce.inputs(shape, torch.float32, seed=3, device="cpu") for shape in (old, new))
    assert torch.equal(a["x"], b["x"]) and a["dim"] == b["dim"] and a["op"] == b["op"]
    assert reduce.bytes_moved(old, 4) == reduce.bytes_moved(new, 4) and reduce.flops(old) == reduce.flops(new)


def test_reduce_inputs_take_the_2d_forms_where_they_suffice():
    # (O, R) over -1 when I is 1 and (R, I) over 0 when O is 1: what every reduce kernel file took;
    # (O, R, I) over 1 otherwise.
    reduce = registry.get("reduce")
    for shape, sizes, dim in [({"O": 4, "R": 5, "I": 1}, (4, 5), -1), ({"O": 1, "R": 5, "I": 3}, (5, 3), 0),
                              ({"O": 2, "R": 5, "I": 3}, (2, 5, 3), 1), ({"O": 1, "R": 1, "I": 1}, (1, 1), -1)]:
        inputs = reduce.inputs({**shape, "op": "mean"}, torch.float32, seed=0, device="cpu")
        assert tuple(inputs["x"].shape) == sizes and inputs["dim"] == dim
        assert reduce.reference(**inputs).numel() == shape["O"] * shape["I"]
