"""The cross-entropy starter beyond what the judge checks: vocab chunks, ignored targets, tunables."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import math

import pytest
import torch
import torch.nn.functional as F

from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

cross_entropy, _ = load_kernel(starter_path("cross_entropy"))


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _targets(n_rows, n_vocab, seed=1):
    return torch.randint(0, n_vocab, (n_rows,), generator=torch.Generator().manual_seed(seed))


def _assert_matches_reference(logits, targets):
    out = cross_entropy.kernel_fn(logits, targets)
    expected = F.cross_entropy(logits.double(), targets.long())
    assert out.dtype == torch.float32 and out.shape == ()
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[logits.dtype], rtol=TOLERANCE[logits.dtype])
    return out


def test_vocab_longer_than_one_chunk_is_read_in_one_online_pass_and_agrees(monkeypatch):
    logits, targets = _randn(5, 100) * 3, _targets(5, 100)
    one_chunk = _assert_matches_reference(logits, targets)
    monkeypatch.setitem(cross_entropy.TUNABLES, "MAX_BLOCK_V", 16)   # 7 chunks, last one partial
    chunked = _assert_matches_reference(logits, targets)
    torch.testing.assert_close(chunked, one_chunk, atol=1e-5, rtol=1e-5)


def test_extreme_logits_survive_the_chunked_path(monkeypatch):
    monkeypatch.setitem(cross_entropy.TUNABLES, "MAX_BLOCK_V", 16)
    signs = torch.randint(0, 2, (6, 90), generator=torch.Generator().manual_seed(3)) * 2 - 1
    _assert_matches_reference(signs * 1e4 + _randn(6, 90), _targets(6, 90))


def test_targets_of_minus_100_are_ignored_like_torch():
    logits, targets = _randn(8, 30), _targets(8, 30)
    targets[[1, 4, 5]] = -100
    _assert_matches_reference(logits, targets)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # the interpreter's 0 / 0
def test_all_targets_ignored_gives_nan_like_torch():
    assert math.isnan(cross_entropy.kernel_fn(_randn(3, 10), torch.full((3,), -100)).item())


def test_a_target_outside_the_vocabulary_gives_nan_instead_of_reading_out_of_bounds():
    targets = _targets(4, 10)
    targets[2] = 10
    assert math.isnan(cross_entropy.kernel_fn(_randn(4, 10), targets).item())


def test_int32_targets_are_accepted():
    _assert_matches_reference(_randn(6, 40), _targets(6, 40).int())


def test_rows_of_a_wider_buffer_are_read_through_the_row_stride():
    logits = _randn(9, 64)[:, :33]
    assert logits.stride(0) == 64
    _assert_matches_reference(logits, _targets(9, 33))


def test_repeated_calls_are_bitwise_identical():
    logits, targets = _randn(50, 70), _targets(50, 70)
    first = cross_entropy.kernel_fn(logits, targets)
    assert all(torch.equal(first, cross_entropy.kernel_fn(logits, targets)) for _ in range(3))


def test_inputs_are_left_unchanged():
    logits, targets = _randn(7, 50), _targets(7, 50)
    before = logits.clone(), targets.clone()
    cross_entropy.kernel_fn(logits, targets)
    assert torch.equal(logits, before[0]) and torch.equal(targets, before[1])


@pytest.mark.parametrize("logits_shape,targets_shape", [((4, 10), (5,)), ((2, 4, 10), (2, 4))])
def test_mismatched_shapes_are_rejected(logits_shape, targets_shape):
    with pytest.raises(ValueError, match="expected logits"):
        cross_entropy.kernel_fn(torch.zeros(logits_shape), torch.zeros(targets_shape, dtype=torch.long))


@pytest.mark.parametrize("name,value", [(name, value) for name, values in cross_entropy.TUNABLE_CHOICES.items()
                                        for value in values])
def test_every_tunable_choice_stays_correct(monkeypatch, name, value):
    monkeypatch.setitem(cross_entropy.TUNABLES, name, value)
    _assert_matches_reference(_randn(3, 1500, dtype=torch.float16) * 4, _targets(3, 1500))
    _assert_matches_reference(_randn(300, 33), _targets(300, 33))   # many rows per program; 2 averaging steps at 256


def test_the_smallest_and_largest_choices_together_stay_correct(monkeypatch):
    for pick in (min, max):
        for name, values in cross_entropy.TUNABLE_CHOICES.items():
            monkeypatch.setitem(cross_entropy.TUNABLES, name, pick(values))
        _assert_matches_reference(_randn(19, 1100), _targets(19, 1100))
