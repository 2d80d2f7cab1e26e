"""autokernel/kernel_types/reduce.py: shapes of the old form read as their layout, the 2-D input forms, and one rule
for which reductions the profiler plans and the router runs."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from autokernel.kernel_types import reduce, registry


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


def test_reduce_inputs_take_the_2d_forms_where_they_suffice():
    # (O, R) over -1 when I is 1 and (R, I) over 0 when O is 1: what every reduce kernel file took;
    # (O, R, I) over 1 otherwise.
    reduce = registry.get("reduce")
    for shape, sizes, dim in [({"O": 4, "R": 5, "I": 1}, (4, 5), -1), ({"O": 1, "R": 5, "I": 3}, (5, 3), 0),
                              ({"O": 2, "R": 5, "I": 3}, (2, 5, 3), 1), ({"O": 1, "R": 1, "I": 1}, (1, 1), -1)]:
        inputs = reduce.inputs({**shape, "op": "mean"}, torch.float32, seed=0, device="cpu")
        assert tuple(inputs["x"].shape) == sizes and inputs["dim"] == dim
        assert reduce.reference(**inputs).numel() == shape["O"] * shape["I"]


# --------------------------------------------------------------------------- torch.max / torch.min with indices
@pytest.mark.parametrize("aten_op, op", [("aten::max", "max"), ("aten::min", "min")])
def test_max_and_min_are_planned_by_their_form(aten_op, op):
    # One op name in a trace, three forms: over a dim (values and indices), over everything (as
    # amax), and of two tensors (elementwise: not a reduction); the out= forms are left to PyTorch.
    def planned(shapes, concrete):
        return reduce.op_shape(aten_op, SimpleNamespace(name=aten_op, concrete_inputs=concrete), shapes)
    assert planned([[2, 3, 4], [], []], ["", 1, False]) == {"O": 2, "R": 3, "I": 4, "op": f"{op}_dim"}
    assert planned([[2, 3, 4], [], []], ["", -1, True]) == {"O": 6, "R": 4, "I": 1, "op": f"{op}_dim"}
    assert planned([[2, 3, 4]], [""]) == {"O": 1, "R": 24, "I": 1, "op": op}
    assert planned([[2, 3, 4], [2, 3, 4]], ["", ""]) is None
    assert planned([[2, 3, 4], [], []], ["", None, False]) is None          # a dim the trace did not record
    assert planned([[2, 3, 4], [], []], ["", 3, False]) is None             # out of range: PyTorch's error
    assert planned([[2, 3, 4], [], [], [2, 4], [2, 4]], ["", 1, False, "", ""]) is None


T = torch.randn(2, 3, 4)


@pytest.mark.parametrize("args, kwargs, shape", [
    ((T, 1), {}, {"O": 2, "R": 3, "I": 4, "op": "max_dim"}),
    ((T,), {"dim": -1, "keepdim": True}, {"O": 6, "R": 4, "I": 1, "op": "max_dim"}),
    ((T, 0, False), {}, {"O": 1, "R": 2, "I": 12, "op": "max_dim"}),
    ((T,), {}, {"O": 1, "R": 24, "I": 1, "op": "max"}),
])
def test_torch_max_is_read_in_every_form_it_takes(args, kwargs, shape):
    reading = reduce.read_max_min("max", *args, **kwargs)
    assert reading.shape == shape
    # The pair runs eagerly only: a graph op has the reference's one-tensor schema.
    assert reading.traceable == (shape["op"] == "max")


@pytest.mark.parametrize("args, kwargs, why", [
    ((T, T), {}, "torch.min of two tensors: elementwise, not a reduction"),
    ((T,), {"other": T}, "torch.min of two tensors: elementwise, not a reduction"),
    ((T, 1), {"out": (torch.empty(2, 4), torch.empty(2, 4, dtype=torch.int64))},
     "a reduction with a dtype or out argument"),
    ((T, (0, 1)), {}, "torch.min over a dim that is not one int"),
    ((T, "channels"), {}, "torch.min over a dim that is not one int"),
    ((T,), {"keepdim": True}, "a calling form the route does not read"),
    ((T, 3), {}, "a reduction over a dimension out of range"),
    ((torch.tensor(1.0), 0), {}, "a reduction of a 0-d tensor, or over named dimensions"),
])
def test_forms_of_torch_min_it_does_not_run_say_why(args, kwargs, why):
    assert reduce.read_max_min("min", *args, **kwargs) == why


def test_the_index_cases_hold_ties_and_nans_that_decide_the_index():
    reduce_type = registry.get("reduce")
    for adversarial in reduce_type.adversarial:
        if adversarial.shape["op"] not in reduce.WITH_INDICES:
            continue
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            inputs = adversarial.make_inputs(adversarial.shape, dtype, torch.Generator().manual_seed(0), "cpu")
            x, dim, op = inputs["x"], inputs["dim"], inputs["op"]
            expected = reduce_type.reference(**inputs)
            # Taking the last of equal values (or of nans) instead of the first gets many lines wrong,
            # and so does taking the first element of every line.
            last = x.shape[dim] - 1 - reduce_type.reference(x.flip(dim), dim, op).indices
            assert int((last != expected.indices).sum()) >= 4, adversarial.name
            assert int((expected.indices != 0).sum()) >= 4, adversarial.name
            if "nan" in adversarial.name:
                assert expected.values.isnan().sum() >= 3 and expected.values.isinf().any()


def test_indices_count_in_the_bytes_a_call_must_move():
    reduce_type = registry.get("reduce")
    values_only, with_indices = ({"O": 16, "R": 256, "I": 256, "op": op} for op in ("max", "max_dim"))
    assert reduce_type.bytes_moved(with_indices, 4) == reduce_type.bytes_moved(values_only, 4) + 16 * 256 * 8


class MaxesAndMins(nn.Module):
    def forward(self, x, y):
        return (torch.max(x, dim=1)[0], x.min(-1, keepdim=True).values, torch.max(x), torch.max(x, y),
                torch.min(x, 0).indices)


def test_a_real_profile_plans_max_and_min_over_a_dim_with_indices():
    from autokernel.profile import profiler
    x = torch.randn(3, 20, 9)
    report = profiler.profile_model(MaxesAndMins().eval(), (x, torch.randn_like(x)), warmup=1, iters=1)
    planned = sorted((site.shape["op"], site.shape["O"], site.shape["R"], site.shape["I"])
                     for site in report.call_sites if site.kernel_type == "reduce")
    assert planned == [("max", 1, 540, 1), ("max_dim", 3, 20, 9), ("min_dim", 1, 3, 180), ("min_dim", 60, 9, 1)]
    # torch.max(x, y) is elementwise: the trace's aten::max of two tensors stays "other".
    assert {row.kernel_type for row in report.ops if row.op == "aten::max" and len(row.input_shapes) == 2} == {"other"}
