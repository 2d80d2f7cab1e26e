"""Tests for autokernel/core/interpreter.py: Triton's interpreter patches triton.language once per launch, with the
same results as patching on every helper call; a scalar comparison broadcast into a mask stays a mask."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as triton_interpreter  # noqa: E402

from autokernel.core import interpreter  # noqa: E402


@triton.jit
def _halved(x):
    return x * 0.5


@triton.jit
def _row_stats(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # tl.max, tl.sum and tl.cdiv are @jit helpers of triton.language; _halved is this file's own.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row * 3, tl.max(x, axis=0))
    tl.store(out_ptr + row * 3 + 1, _halved(tl.sum(x, axis=0)))
    tl.store(out_ptr + row * 3 + 2, tl.cdiv(n_cols, 4))


@triton.jit
def _refuses(x_ptr, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK > 64, "refused on purpose")
    tl.store(x_ptr, tl.sum(tl.arange(0, BLOCK), axis=0))


@triton.jit
def _batched_copy(x_ptr, out_ptr, BATCH, BLOCK: tl.constexpr):
    # Inductor's batched matmul template masks its store the same way: a block mask and a scalar comparison.
    batch = tl.program_id(1)
    rows, cols = tl.arange(0, BLOCK)[:, None], tl.arange(0, BLOCK)[None, :]
    mask = (rows < 3) & (cols < 3) & (batch < BATCH)
    offsets = batch * 9 + rows * 3 + cols
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask, other=0.0) * 2, mask)


@triton.jit
def _dot(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    rows, cols = tl.arange(0, BLOCK)[:, None], tl.arange(0, BLOCK)[None, :]
    a, b = tl.load(a_ptr + rows * BLOCK + cols), tl.load(b_ptr + rows * BLOCK + cols)
    tl.store(out_ptr + rows * BLOCK + cols, tl.dot(a, b, out_dtype=tl.float32))


@pytest.fixture
def language_patches(monkeypatch):
    """How many times Triton's own patching of triton.language ran (four module scans each, at least)."""
    assert interpreter.choose()
    count = {"scans": 0}
    scan = triton_interpreter._patch_builtin

    def counted(*args, **kwargs):
        count["scans"] += 1
        return scan(*args, **kwargs)

    monkeypatch.setattr(triton_interpreter, "_patch_builtin", counted)
    return count


def _row_stats_of(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], 3)
    _row_stats[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


def test_a_launch_of_sixteen_programs_patches_the_language_as_often_as_one_of_one(language_patches):
    x = torch.randint(-50, 50, (16, 40)).float()          # small integers: sums and maxima are exact
    _row_stats_of(x[:1])         # the interpreter's first launch of a kernel adds names to its helpers' modules
    scans_of_one_program = None
    for rows in (1, 16):
        language_patches["scans"] = 0
        out = _row_stats_of(x[:rows])
        expected = torch.stack([x[:rows].max(1).values, x[:rows].sum(1) * 0.5, torch.full((rows,), 10.0)], 1)
        assert torch.equal(out, expected)
        if scans_of_one_program is None:
            scans_of_one_program = language_patches["scans"]
    # Without the skip each of the 16 programs' four helper calls would patch again: 16 times the scans of one.
    assert language_patches["scans"] == scans_of_one_program


def test_a_failed_launch_leaves_the_next_one_patched_from_scratch(language_patches):
    with pytest.raises(Exception, match="refused on purpose"):
        _refuses[(1,)](torch.zeros(1, dtype=torch.int32), BLOCK=8)
    x = torch.randint(-50, 50, (4, 40)).float()
    language_patches["scans"] = 0
    out = _row_stats_of(x)
    assert torch.equal(out[:, 0], x.max(1).values)
    assert language_patches["scans"] > 0, "the launch after a failed one must patch the language itself"


def test_choosing_again_wraps_triton_once():
    assert interpreter.choose() and interpreter.choose()
    patch = triton_interpreter._patch_lang
    call = triton_interpreter.GridExecutor.__call__
    assert patch.autokernel_once_per_launch
    assert interpreter._patch_once_per_launch()
    assert triton_interpreter._patch_lang is patch and triton_interpreter.GridExecutor.__call__ is call


def test_a_scalar_comparison_in_a_block_mask_keeps_the_mask_boolean():
    # Before: "mask has unsupported dtype" (the scalar's splat took its operands' int32), which dropped every bmm
    # region starter of a model checked on the CPU.
    assert interpreter.choose()
    x = torch.randn(2, 3, 3)
    out = torch.zeros(2, 3, 3)
    _batched_copy[(1, 2)](x, out, 2, BLOCK=4)
    assert torch.equal(out, x * 2)
    assert interpreter._splat_in_the_blocks_type()


def test_a_dot_of_bfloat16_multiplies_the_numbers_not_their_bits():
    # Before: the uint16 arrays the interpreter holds bfloat16 in were multiplied as integers (off by ~1e10).
    assert interpreter.choose()
    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    out = torch.empty(16, 16)
    _dot[(1,)](a, b, out, BLOCK=16)
    expected = a.float() @ b.float()        # bfloat16 products are exact in float32; only the sums' order differs
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_the_numpy_dtype_table_answers_as_the_interpreters_own_function():
    assert interpreter.choose() and interpreter._numpy_dtypes_from_a_table()
    table = triton_interpreter._get_np_dtype
    assert table.autokernel_table
    scalars = [getattr(tl, name) for name in ("int1", "float16", "bfloat16", "float32", "float64", "int8", "uint8",
                                              "int16", "int32", "uint32", "int64", "uint64", "float8e5", "float8e4nv")]
    pointers = [tl.pointer_type(tl.float16), tl.pointer_type(tl.int64)]
    for dtype in scalars + pointers + [tl.block_type(d, [4, 8]) for d in scalars + pointers]:
        assert table(dtype) == table.autokernel_own(dtype), dtype
