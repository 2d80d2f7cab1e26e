"""The reduce starter beyond what the judge checks: any rank and dim, split reductions, nan, tunables, and
max / min with the index of the first extreme (max_dim, min_dim) on all of these."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel
from autokernel.judge.candidate.worker_guards import LaunchCounter

reduce, _ = load_kernel(starter_path("reduce"))


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _ties(*shape, dtype=torch.float32, seed=0):
    """Small integers: every line holds its maximum and its minimum several times."""
    return torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _assert_matches_reference(x, dim, op):
    out = reduce.kernel_fn(x, dim, op)
    expected = reference.reduce(x.double(), dim, op)
    if op in ("max_dim", "min_dim"):
        # The index of the first extreme, exactly; the value that index holds, exactly, the sign of a zero too.
        values, indices = out
        assert indices.dtype == torch.int64 and torch.equal(indices, expected.indices)
        want = reference.reduce(x, dim, op).values
        assert values.dtype == x.dtype
        torch.testing.assert_close(values, want, atol=0, rtol=0, equal_nan=True)
        assert torch.equal(values.signbit() | values.isnan(), want.signbit() | want.isnan())
        return out
    assert out.dtype == x.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[x.dtype], rtol=TOLERANCE[x.dtype])
    return out


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("shape", [(5, 37, 3), (2, 3, 4, 5), (7, 1, 9), (40,), (1, 6, 1)])
def test_every_dim_of_every_rank(shape, op):
    x = _randn(*shape)
    for dim in range(-len(shape), len(shape)):
        _assert_matches_reference(x, dim, op)


def _split_always(monkeypatch):
    monkeypatch.setitem(reduce.TUNABLES, "TILE_ELEMS", 64)        # small tiles: many R blocks to split
    monkeypatch.setitem(reduce.TUNABLES, "MAX_BLOCK_R", 64)
    monkeypatch.setitem(reduce.TUNABLES, "MIN_PROGRAMS", 10**6)   # always split as far as the blocks allow
    monkeypatch.setitem(reduce.TUNABLES, "SPLIT_MIN_BYTES", 0)     # however small the problem


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("shape,dim", [((2, 300, 5), 1), ((2, 700), -1), ((700, 6), 0)])
def test_splitting_the_reduced_dim_across_programs_agrees(monkeypatch, shape, dim, op):
    x = _randn(*shape, dtype=torch.float16)
    whole = _assert_matches_reference(x, dim, op)
    _split_always(monkeypatch)
    split = _assert_matches_reference(x, dim, op)
    torch.testing.assert_close(split, whole, atol=1e-2, rtol=1e-2)
    assert torch.equal(split, reduce.kernel_fn(x, dim, op))   # the two-launch result is reproducible


@pytest.mark.parametrize("op", ["max_dim", "min_dim"])
@pytest.mark.parametrize("shape,dim", [((2, 300, 5), 1), ((2, 700), -1), ((700, 6), 0)])
def test_split_extremes_keep_the_first_index_across_splits(monkeypatch, shape, dim, op):
    # Ties in every split, and nans in a late split and an early one: the second launch must
    # choose among the partials by their indices in the whole line, not by split order alone.
    x = _ties(*shape, dtype=torch.bfloat16)
    x.select(dim, 650 if shape[dim] > 650 else 250).fill_(float("nan"))
    x.narrow(dim, 100, 1).select(-1 if dim == 0 else 0, 1).fill_(float("nan"))
    _split_always(monkeypatch)
    assert len(reduce._plan(x.shape, dim, op, x.dtype).launches) == 2
    _assert_matches_reference(x, dim, op)


@pytest.mark.parametrize("op", ["sum", "max", "max_dim"])
@pytest.mark.parametrize("max_block_r", [64, 8192])    # rows read in chunks, or each in one block
def test_many_contiguous_rows_take_the_row_kernel_and_agree(monkeypatch, op, max_block_r):
    x = _randn(37, 300, dtype=torch.float16)
    x[5, 123] = float("nan")
    general = reduce.kernel_fn(x, -1, op)
    monkeypatch.setitem(reduce.TUNABLES, "MIN_PROGRAMS", 1)
    monkeypatch.setitem(reduce.TUNABLES, "MAX_BLOCK_R", max_block_r)
    monkeypatch.setattr(reduce, "_reduce_over_r", None)    # the strided kernel would fail to launch
    rows = reduce.kernel_fn(x, -1, op)
    if op == "max_dim":
        assert rows.indices[5] == 123 if hasattr(rows, "indices") else rows[1][5] == 123
        rows, general = rows[0], general[0]
    assert rows.isnan().nonzero().flatten().tolist() == [5]
    torch.testing.assert_close(rows, general, atol=1e-2, rtol=1e-2, equal_nan=True)
    x[5, 123] = 0.0
    _assert_matches_reference(x, -1, op)
    if op == "max_dim":
        _assert_matches_reference(_ties(37, 300, dtype=torch.float16), -1, op)


class _Launches:
    """Records the kernels kernel_fn launches and the tensors it allocates with torch.empty."""

    def __init__(self, monkeypatch):
        self.counter = LaunchCounter().install()
        self.allocations = []
        empty = torch.empty

        def recording_empty(*args, **kwargs):
            tensor = empty(*args, **kwargs)
            self.allocations.append((tuple(tensor.shape), tensor.dtype))
            return tensor
        monkeypatch.setattr(torch, "empty", recording_empty)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.counter.uninstall()


@pytest.mark.parametrize("op", ["sum", "min"])
def test_a_small_middle_dim_reduction_is_one_launch_with_no_partials(monkeypatch, op):
    # sum_middle's (16, 256, 256) over dim 1: 64 bands of 64 columns are too few programs, but the
    # whole problem is 4 MiB, host-bound on a GPU: narrower bands, not a split with a second launch.
    x = _randn(16, 256, 256)
    reduce.kernel_fn(x, 1, op)                                      # planned once; counted below
    with _Launches(monkeypatch) as launches:
        _assert_matches_reference(x, 1, op)
    assert launches.counter.count == 1
    assert launches.allocations == [((16, 256), torch.float32)]   # the output, and no float32 partials


def test_a_middle_dim_max_with_indices_is_one_launch_writing_values_and_int64_indices(monkeypatch):
    # max_middle's torch.max(x, dim=1) over (16, 256, 256) is planned as the sum is: one launch, no partials.
    plan = reduce._plan(torch.Size((16, 256, 256)), 1, "max_dim", torch.float32)
    assert len(plan.launches) == 1 and plan.partials_shape is None and plan.with_index
    x = _ties(16, 256, 64)
    with _Launches(monkeypatch) as launches:
        _assert_matches_reference(x, 1, "max_dim")
    assert launches.counter.count == 1
    assert launches.allocations == [((16, 64), torch.float32), ((16, 64), torch.int64)]


def test_a_large_reduction_with_too_few_programs_still_splits(monkeypatch):
    # The same shape made to look large: each of the few programs would stream more than
    # SPLIT_MIN_BYTES, so R is split (two launches, float32 partials).
    monkeypatch.setitem(reduce.TUNABLES, "SPLIT_MIN_BYTES", 1024)
    x = _randn(4, 512, 40)
    with _Launches(monkeypatch) as launches:
        _assert_matches_reference(x, 1, "mean")
    assert launches.counter.count == 2
    assert any(shape[1] > 1 and dtype == torch.float32 for shape, dtype in launches.allocations[1:])


def test_narrow_bands_agree_with_wide_ones(monkeypatch):
    x = _randn(3, 70, 200, dtype=torch.bfloat16)
    wide = _assert_matches_reference(x, 1, "sum")
    monkeypatch.setitem(reduce.TUNABLES, "MIN_PROGRAMS", 10**6)    # narrow as far as allowed, never split
    monkeypatch.setitem(reduce.TUNABLES, "SPLIT_MIN_BYTES", 10**12)
    (launch,) = reduce._plan(x.shape, 1, "sum", x.dtype).launches
    assert launch.meta["BLOCK_INNER"] == reduce.TUNABLES["MIN_STRIDED_BLOCK_INNER"] == 16
    narrow = _assert_matches_reference(x, 1, "sum")
    torch.testing.assert_close(narrow, wide, atol=TOLERANCE[x.dtype], rtol=TOLERANCE[x.dtype])


def test_max_propagates_nan_like_amax():
    x = _randn(6, 50)
    x[2, 7] = x[4, 0] = float("nan")
    assert reduce.kernel_fn(x, -1, "max").isnan().tolist() == [False, False, True, False, True, False]
    assert reduce.kernel_fn(x, 0, "max").isnan().nonzero().flatten().tolist() == [0, 7]


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_max_and_min_treat_nan_and_inf_as_amax_and_amin_do(dim):
    x = _randn(4, 6, 5)
    x[1, 2, 3] = float("nan")
    x[2, :, :] = float("inf")
    x[3, :, :] = -float("inf")
    x[0, 4, 1] = float("inf")
    x[0, 5, 2] = -float("inf")
    for op, torch_op in (("max", torch.amax), ("min", torch.amin)):
        out = reduce.kernel_fn(x, dim, op)
        torch.testing.assert_close(out, torch_op(x, dim), equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("op", ["max_dim", "min_dim"])
@pytest.mark.parametrize("shape", [(5, 37, 3), (2, 3, 4, 5), (7, 1, 9), (40,), (1, 6, 1)])
def test_extremes_with_indices_over_every_dim_take_the_first_of_ties(shape, op, dtype):
    x = _ties(*shape, dtype=dtype)
    for dim in range(-len(shape), len(shape)):
        _assert_matches_reference(x, dim, op)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_extremes_with_indices_treat_nan_inf_and_signed_zero_as_torch_max_does(dim):
    x = _ties(6, 8, 7)
    x[1, 2, 3] = x[1, 5, 3] = float("nan")     # the first of two nans, in any direction
    x[2, :, :] = float("inf")                   # lines of +inf: index 0
    x[3, :, :] = -float("inf")                  # lines of -inf: index 0
    x[0, 4, 1] = x[0, 6, 1] = float("inf")
    x[0, 5, 2] = x[0, 7, 2] = -float("inf")
    x[4, 3, 4] = float("inf")
    x[4, 6, 4] = float("nan")                   # a nan after an inf still wins
    x[5] = 0.0
    x[5, 1::2] = -0.0                           # of 0.0 and -0.0 (equal), the first; its sign too
    for op in ("max_dim", "min_dim"):
        _assert_matches_reference(x, dim, op)


def test_float16_sums_near_its_limit_are_accumulated_in_float32():
    # 1024 values near 60 sum to about 61440, where float16's spacing is 32: a float16 accumulator
    # would round away most of every addition. Middle dim, so the strided kernel accumulates.
    x = (60 + _randn(2, 1024, 8)).half()
    out = _assert_matches_reference(x, 1, "sum")
    assert out.isfinite().all()
    _assert_matches_reference(x, 1, "mean")


def test_mean_over_nothing_is_nan_as_in_pytorch():
    assert reduce.kernel_fn(torch.zeros(3, 0, 2), 1, "mean").isnan().all()


def test_non_contiguous_input_is_reduced_by_value():
    x = _randn(30, 40).T
    _assert_matches_reference(x, 0, "sum")
    _assert_matches_reference(x, 1, "max")


def test_zero_dim_tensor_and_empty_sum():
    assert reduce.kernel_fn(torch.tensor(3.0), 0, "sum").item() == 3.0
    assert torch.equal(reduce.kernel_fn(torch.zeros(4, 0), -1, "sum"), torch.zeros(4))
    values, indices = reduce.kernel_fn(torch.zeros(0, 5), -1, "max_dim")     # nothing to reduce: an empty pair
    assert values.shape == indices.shape == (0,) and indices.dtype == torch.int64
    values, indices = reduce.kernel_fn(torch.tensor(3.0), 0, "min_dim")
    assert values.item() == 3.0 and indices.item() == 0


def test_inputs_are_left_unchanged():
    x = _randn(7, 50)
    before = x.clone()
    reduce.kernel_fn(x, 0, "max")
    assert torch.equal(x, before)


@pytest.mark.parametrize("args,error,match", [
    ((torch.zeros(4, 0), -1, "max"), ValueError, "no identity"),
    ((torch.zeros(4, 5), 2, "sum"), IndexError, "out of range"),
    ((torch.zeros(4, 5), -1, "median"), ValueError, "unknown op"),
    ((torch.zeros(4, 5), -1, ["sum"]), ValueError, "unknown op"),
    ((torch.zeros(4, 0), -1, "min"), ValueError, "no identity"),
    ((torch.zeros(4, 0), -1, "max_dim"), ValueError, "no identity"),
    ((torch.zeros(4, 5), (0, 1), "sum"), TypeError, "single int"),
    ((torch.zeros(4, 5, dtype=torch.int32), -1, "sum"), TypeError, "floating-point")])
def test_bad_arguments_are_rejected(args, error, match):
    with pytest.raises(error, match=match):
        reduce.kernel_fn(*args)


@pytest.mark.parametrize("name,value", [(name, value) for name, values in reduce.TUNABLE_CHOICES.items()
                                        for value in values])
def test_every_tunable_choice_stays_correct(monkeypatch, name, value):
    monkeypatch.setitem(reduce.TUNABLES, name, value)
    _assert_matches_reference(_randn(3, 1500, dtype=torch.float16), -1, "sum")   # long contiguous rows
    _assert_matches_reference(_randn(37, 33), -1, "max")                         # many short rows per program
    _assert_matches_reference(_randn(4, 300, 70), 1, "sum")                      # strided middle dimension
    _assert_matches_reference(_ties(4, 100, 30), 1, "max_dim")                    # ties, strided
    _assert_matches_reference(_ties(37, 33), -1, "min_dim")                       # ties, contiguous rows


def test_the_smallest_and_largest_choices_together_stay_correct(monkeypatch):
    for pick in (min, max):
        for name, values in reduce.TUNABLE_CHOICES.items():
            monkeypatch.setitem(reduce.TUNABLES, name, pick(values))
        _assert_matches_reference(_randn(19, 1100), -1, "sum")
        _assert_matches_reference(_randn(1100, 19), 0, "max")
        _assert_matches_reference(_ties(19, 1100), -1, "max_dim")
