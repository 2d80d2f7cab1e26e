"""The LayerNorm starter beyond what the judge checks: the chunked (Chan) path, batch dims, tunables."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

layernorm, _ = load_kernel(starter_path("layernorm"))


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _affine(n, dtype=torch.float32):
    return (1 + 0.1 * _randn(n, seed=1)).to(dtype), (0.1 * _randn(n, seed=2)).to(dtype)


def _assert_matches_reference(x, weight, bias, eps=1e-5, dim=-1):
    out = layernorm.kernel_fn(x, weight, bias, eps, dim)
    expected = reference.layernorm(x.double(), weight.double(), bias.double(), eps, dim)
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), expected, atol=TOLERANCE[x.dtype], rtol=TOLERANCE[x.dtype])
    return out


def test_rows_longer_than_one_block_merge_chunk_statistics_and_agree(monkeypatch):
    x = _randn(5, 100) * 3 + 2
    one_block = _assert_matches_reference(x, *_affine(100))
    monkeypatch.setitem(layernorm.TUNABLES, "MAX_BLOCK_N", 16)   # 100 columns -> 7 chunks, last one partial
    chunked = _assert_matches_reference(x, *_affine(100))
    torch.testing.assert_close(chunked, one_block, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("max_block_n", [16, 16384])
def test_near_constant_rows_keep_float32_precision_on_both_paths(monkeypatch, max_block_n):
    # Mean 100, standard deviation 1e-4: a float32 mean of ~100 is already off by ~4e-6, which
    # eps^-1/2 ~ 316 amplifies past the float32 tolerance. Only the shifted statistics pass.
    monkeypatch.setitem(layernorm.TUNABLES, "MAX_BLOCK_N", max_block_n)
    _assert_matches_reference(100 + 1e-4 * _randn(6, 300), *_affine(300))


@pytest.mark.parametrize("max_block_n", [64, 16384])
def test_near_constant_channels_keep_float32_precision_over_dim_1(monkeypatch, max_block_n):
    # The same shifted statistics over the channels of each position, in one tile or in chunks
    # (300 channels x 64 positions with MAX_BLOCK_N 64: chunks of one channel row, the last partial).
    monkeypatch.setitem(layernorm.TUNABLES, "MAX_BLOCK_N", max_block_n)
    monkeypatch.setattr(layernorm, "_layernorm_rows", None)         # not the last-dim kernel
    _assert_matches_reference(100 + 1e-4 * _randn(2, 300, 70), *_affine(300), dim=1)


def _force_split(monkeypatch, chunk=256, tile_elems=4096):
    """Few long rows at test sizes: split into chunks of `chunk` columns, read in blocks of at most tile_elems."""
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_ROWS_BELOW", 10**6)
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_MIN_ROW_BYTES", 0)
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_CHUNK", chunk)
    monkeypatch.setitem(layernorm.TUNABLES, "TILE_ELEMS", tile_elems)
    monkeypatch.setattr(layernorm, "_layernorm_rows", None)        # the one-program-per-row kernel would fail


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("chunk,tile_elems", [(256, 4096), (256, 64), (100, 32)])   # chunks of one block or several
def test_few_long_rows_split_into_chunks_agree(monkeypatch, dtype, chunk, tile_elems):
    # 1000 columns in chunks of 256 (the last one partial), or of 100 read in blocks of 32 (chunks
    # are rounded up to whole blocks: 128), with a row stride wider than the row.
    x = (_randn(3, 1100, dtype=dtype) * 3 + 2)[:, :1000]
    whole = _assert_matches_reference(x, *_affine(1000, dtype))
    _force_split(monkeypatch, chunk, tile_elems)
    split = _assert_matches_reference(x, *_affine(1000, dtype))
    torch.testing.assert_close(split, whole, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_split_rows_keep_precision_for_near_constant_rows_far_from_zero(monkeypatch, dtype):
    # Mean 100, standard deviation 1e-4 (the judge's near-zero-variance case), and a row at 1e4
    # with spread 1: the chunks' statistics are shifted by the row's first element and merged
    # without ever forming a sum of squares of the raw values.
    _force_split(monkeypatch, chunk=128, tile_elems=64)
    x = torch.cat([100 + 1e-4 * _randn(2, 700), 1e4 + _randn(1, 700, seed=3)]).to(dtype)
    _assert_matches_reference(x, *_affine(700, dtype))


def test_the_split_path_is_two_launches_with_one_statistics_buffer(monkeypatch):
    _force_split(monkeypatch)
    launched = []
    for name in ("_layernorm_split_stats", "_layernorm_split_apply"):
        kernel = getattr(layernorm, name)
        monkeypatch.setattr(layernorm, name, _Recording(kernel, name, launched))
    _assert_matches_reference(_randn(2, 1000), *_affine(1000))
    assert launched == [("_layernorm_split_stats", 8), ("_layernorm_split_apply", 8)]   # 2 rows x 4 chunks


def test_longer_rows_take_longer_chunks_to_bound_the_statistics_each_program_rereads(monkeypatch):
    _force_split(monkeypatch)
    monkeypatch.setattr(layernorm, "SPLIT_MAX_CHUNKS", 3)
    launched = []
    kernel = layernorm._layernorm_split_apply
    monkeypatch.setattr(layernorm, "_layernorm_split_apply", _Recording(kernel, "apply", launched))
    _assert_matches_reference(_randn(2, 1000) - 7, *_affine(1000))
    assert launched == [("apply", 4)]     # chunks of 256 would be 4 a row; of 512 (whole blocks), 2


def test_many_or_short_rows_are_not_split(monkeypatch):
    monkeypatch.setattr(layernorm, "_layernorm_split_stats", None)   # a split would fail
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_MIN_ROW_BYTES", 0)
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_CHUNK", 256)
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_ROWS_BELOW", 4)
    _assert_matches_reference(_randn(4, 1000), *_affine(1000))        # rows enough
    _assert_matches_reference(_randn(2, 256), *_affine(256))          # one chunk only
    monkeypatch.setitem(layernorm.TUNABLES, "SPLIT_MIN_ROW_BYTES", 4001)
    _assert_matches_reference(_randn(2, 1000), *_affine(1000))        # 4000-byte rows: too short


class _Recording:
    """Stands in for a Triton kernel: notes (name, grid size) of each launch, then launches it."""

    def __init__(self, kernel, name, launched):
        self.kernel, self.name, self.launched = kernel, name, launched

    def __getitem__(self, grid):
        self.launched.append((self.name, grid[0]))
        return self.kernel[grid]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(2, 16, 8, 8), (3, 7, 33), (1, 1, 37), (2, 1023, 5)])
def test_dim_1_normalizes_each_position_over_its_channels(shape, dtype):
    _assert_matches_reference(_randn(*shape, dtype=dtype), *_affine(shape[1], dtype), dim=1)


def test_a_non_contiguous_input_over_dim_1_is_normalized_by_value():
    _assert_matches_reference(_randn(3, 20, 6, 4).transpose(2, 3), *_affine(20), dim=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_leading_batch_dims_are_rows(dtype):
    _assert_matches_reference(_randn(2, 3, 40, dtype=dtype), *_affine(40, dtype))


def test_rows_of_a_wider_buffer_are_read_through_the_row_stride():
    x = _randn(9, 64)[:, :33]
    assert x.stride(0) == 64
    _assert_matches_reference(x, *_affine(33))


def test_a_single_column_normalizes_to_the_bias():
    weight, bias = _affine(1)
    out = _assert_matches_reference(_randn(7, 1), weight, bias)
    assert torch.allclose(out, bias.expand(7, 1))


def test_inputs_are_left_unchanged():
    x, (weight, bias) = _randn(7, 50), _affine(50)
    before = [t.clone() for t in (x, weight, bias)]
    layernorm.kernel_fn(x, weight, bias)
    assert all(torch.equal(t, b) for t, b in zip((x, weight, bias), before))


def test_weight_or_bias_of_the_wrong_size_is_rejected():
    weight, bias = _affine(32)
    with pytest.raises(ValueError, match="bias"):
        layernorm.kernel_fn(_randn(4, 32), weight, bias[:31])
    with pytest.raises(ValueError, match="weight"):
        layernorm.kernel_fn(_randn(2, 8, 32), weight, bias, 1e-5, 1)
    with pytest.raises(ValueError, match="over dim 3"):
        layernorm.kernel_fn(_randn(2, 32, 4), weight, bias, 1e-5, 3)


@pytest.mark.parametrize("name,value", [(name, value) for name, values in layernorm.TUNABLE_CHOICES.items()
                                        for value in values])
def test_every_tunable_choice_stays_correct(monkeypatch, name, value):
    monkeypatch.setitem(layernorm.TUNABLES, name, value)
    _assert_matches_reference(_randn(3, 1500, dtype=torch.float16) + 5, *_affine(1500, torch.float16))
    _assert_matches_reference(_randn(37, 33), *_affine(33))
    _assert_matches_reference(_randn(2, 40, 300) + 3, *_affine(40), dim=1)        # channels, positions apart


def test_the_smallest_and_largest_choices_together_stay_correct(monkeypatch):
    for pick in (min, max):
        for name, values in layernorm.TUNABLE_CHOICES.items():
            monkeypatch.setitem(layernorm.TUNABLES, name, pick(values))
        _assert_matches_reference(_randn(19, 1100), *_affine(1100))
        _assert_matches_reference(_randn(2, 300, 70), *_affine(300), dim=1)
