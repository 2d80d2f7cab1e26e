"""The softmax starter beyond what the judge checks: the online path, masked chunks, batch dims, tunables."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

softmax, _ = load_kernel(starter_path("softmax"))


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _assert_matches_reference(x):
    out = softmax.kernel_fn(x)
    expected = reference.softmax(x.double())
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[x.dtype], rtol=TOLERANCE[x.dtype])
    return out


def test_rows_longer_than_one_block_take_the_online_path_and_agree(monkeypatch):
    x = _randn(5, 100) * 4
    one_block = _assert_matches_reference(x)
    monkeypatch.setitem(softmax.TUNABLES, "MAX_BLOCK_N", 16)   # 100 columns -> 7 chunks, last one partial
    online = _assert_matches_reference(x)
    torch.testing.assert_close(online, one_block, atol=1e-6, rtol=1e-6)


def test_a_fully_masked_first_chunk_does_not_poison_the_running_sum(monkeypatch):
    monkeypatch.setitem(softmax.TUNABLES, "MAX_BLOCK_N", 16)
    x = _randn(4, 70)
    x[:, :40] = float("-inf")   # the first two chunks hold nothing but -inf
    out = _assert_matches_reference(x)
    assert not out.isnan().any() and torch.all(out[:, :40] == 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_leading_batch_dims_are_rows_and_each_row_sums_to_one(dtype):
    out = _assert_matches_reference(_randn(2, 3, 40, dtype=dtype))
    torch.testing.assert_close(out.float().sum(-1), torch.ones(2, 3), atol=TOLERANCE[dtype] * 4, rtol=0)


def test_rows_of_a_wider_buffer_are_read_through_the_row_stride():
    x = _randn(9, 64)[:, :33]
    assert x.stride(0) == 64
    _assert_matches_reference(x)


def test_a_zero_dim_tensor_softmaxes_to_one():
    assert softmax.kernel_fn(torch.tensor(3.5)).item() == 1.0


def test_inputs_are_left_unchanged():
    x = _randn(7, 50)
    before = x.clone()
    softmax.kernel_fn(x)
    assert torch.equal(x, before)


@pytest.mark.parametrize("name,value", [(name, value) for name, values in softmax.TUNABLE_CHOICES.items()
                                        for value in values])
def test_every_tunable_choice_stays_correct(monkeypatch, name, value):
    monkeypatch.setitem(softmax.TUNABLES, name, value)
    _assert_matches_reference(_randn(3, 1500, dtype=torch.float16) * 5)   # online when the cap is 1024
    _assert_matches_reference(_randn(37, 33))                             # many short rows per program


def test_the_smallest_and_largest_choices_together_stay_correct(monkeypatch):
    for pick in (min, max):
        for name, values in softmax.TUNABLE_CHOICES.items():
            monkeypatch.setitem(softmax.TUNABLES, name, pick(values))
        _assert_matches_reference(_randn(19, 1100))
