"""The judge's building blocks: tolerances, non-finite handling, poisoning and launch counting."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autokernel.correctness import CheckFailure, LaunchCounter, compare, poisoned_allocations, same_bits  # noqa: E402


def test_within_tolerance_passes_and_outside_fails_with_location():
    ref = torch.linspace(-1, 1, 100, dtype=torch.float64)
    compare((ref + 5e-3).half(), ref.half(), ref, torch.float16)
    bad = ref.clone()
    bad[37] += 0.5
    with pytest.raises(CheckFailure, match=r"1 of 100 elements wrong; worst at index \[37\]"):
        compare(bad.half(), ref.half(), ref, torch.float16)


def test_float32_tolerance_is_tight():
    ref = torch.ones(10, dtype=torch.float64)
    compare((ref + 1e-5).float(), ref.float(), ref, torch.float32)
    with pytest.raises(CheckFailure):
        compare((ref + 1e-3).float(), ref.float(), ref, torch.float32)


def test_nan_or_inf_where_reference_is_finite_fails():
    ref = torch.zeros(4, dtype=torch.float64)
    out = torch.tensor([0.0, float("nan"), 0.0, 0.0])
    with pytest.raises(CheckFailure, match="nan where the reference has 0"):
        compare(out, out, ref, torch.float32)
    with pytest.raises(CheckFailure, match="inf where the reference has"):
        compare(torch.tensor([0.0, float("inf"), 0.0, 0.0]), out, ref, torch.float32)


def test_matching_non_finite_values_pass_and_mismatched_fail():
    ref = torch.tensor([float("-inf"), 1.0, float("nan")], dtype=torch.float64)
    compare(torch.tensor([float("-inf"), 1.0, float("nan")]), ref.float(), ref, torch.float32)
    with pytest.raises(CheckFailure):
        compare(torch.tensor([float("inf"), 1.0, float("nan")]), ref.float(), ref, torch.float32)


def test_absolute_tolerance_scales_with_large_outputs():
    ref = torch.full((1000,), 300.0, dtype=torch.float64)
    ref[0] = 0.5                       # an entry that cancelled to near zero among large ones
    out = ref.clone()
    out[0] += 1.0                      # 1.0 off: inside 1e-2 of an output scale of ~300
    compare(out.half(), ref.half(), ref, torch.float16)
    out[0] += 5.0
    with pytest.raises(CheckFailure):
        compare(out.half(), ref.half(), ref, torch.float16)


def test_shape_and_dtype_must_match_the_reference():
    ref = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(CheckFailure, match="output shape"):
        compare(torch.zeros(16), torch.zeros(4, 4), ref, torch.float32)
    with pytest.raises(CheckFailure, match="output dtype"):
        compare(torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, 4), ref, torch.float32)


def test_poisoned_allocations_are_nan_and_restored_afterwards():
    with poisoned_allocations():
        assert torch.isnan(torch.empty(8)).all()
        assert torch.isnan(torch.empty(8, dtype=torch.bfloat16)).all()
    assert not torch.are_deterministic_algorithms_enabled()


def test_same_bits_distinguishes_negative_zero_and_treats_nan_as_equal():
    assert same_bits(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert not same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def test_launch_counter_counts_triton_launches_only():
    counter = LaunchCounter().install()
    try:
        x = torch.randn(16)
        y = torch.empty_like(x)
        _copy[(1,)](x, y, 16, BLOCK=16)
        torch.softmax(x, dim=0)
        assert counter.count == 1
    finally:
        counter.uninstall()
    _copy[(1,)](x, y, 16, BLOCK=16)
    assert counter.count == 1
