"""The RMSNorm + linear starter beyond what the judge checks: the norm pass, ragged edges, strides, overflow, tunables."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import random

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel
from autokernel.kernel_types import rmsnorm_linear

fused, _ = load_kernel(starter_path("rmsnorm_linear"))


def _inputs(m, n, k, dtype=torch.float32, seed=0, maker=rmsnorm_linear.rmsnorm_linear_inputs):
    gen = torch.Generator().manual_seed(seed)
    return maker({"M": m, "N": n, "K": k}, dtype, gen, "cpu")


def _assert_matches_reference(inputs):
    out = fused.kernel_fn(**inputs)
    upcast = {name: v.double() if isinstance(v, torch.Tensor) else v for name, v in inputs.items()}
    expected = reference.rmsnorm_linear(**upcast)
    tol = TOLERANCE[inputs["x"].dtype]
    assert out.dtype == inputs["x"].dtype and out.shape == expected.shape
    scale = expected.pow(2).mean().sqrt().item() or 1.0
    torch.testing.assert_close(out.double(), expected, atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 13, 70], ids=["one row", "one row tile", "three row tiles"])
def test_each_dtype_matches_the_reference(dtype, m):
    _assert_matches_reference(_inputs(m, 40, 72, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_norm_pass_normalizes_first_then_the_engine_runs_the_gemm(monkeypatch, dtype):
    monkeypatch.setitem(fused.TUNABLES, "NORM_BLOCK", 16)          # rows of 136 take nine blocks: a tail too
    normed, launches = [], []
    real_rows, real_gemm = fused._rmsnorm_rows, fused.engine_gemm
    monkeypatch.setattr(fused, "_rmsnorm_rows", lambda *a: normed.append(real_rows(*a)) or normed[-1])
    monkeypatch.setattr(fused, "engine_gemm", lambda a, b, **kw: launches.append(a) or real_gemm(a, b, **kw))
    inputs = _inputs(70, 72, 136, dtype=dtype)
    inputs["x"] = inputs["x"] * torch.linspace(0.1, 10, 70, dtype=dtype)[:, None]
    _assert_matches_reference(inputs)
    assert len(normed) == 1 and len(launches) == 1 and launches[0] is normed[0]


def test_the_pointer_path_agrees_with_the_tma_path(monkeypatch):
    inputs = _inputs(37, 48, 80, dtype=torch.float16)
    through_tma = fused.kernel_fn(**inputs)
    monkeypatch.setattr(fused, "_engine_tma", lambda t: False)
    torch.testing.assert_close(fused.kernel_fn(**inputs), through_tma, atol=2e-3, rtol=2e-3)


def test_the_plan_choices_are_the_engines_plans():
    assert fused.TUNABLE_CHOICES["plan"][1:] == list(fused.ENGINE_PLANS["plain"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rows_whose_squares_overflow_half_precision(dtype):
    inputs = _inputs(16, 48, 96, dtype=dtype, maker=rmsnorm_linear.huge_rows)
    x, g = inputs["x"].float(), inputs["norm_weight"].float()
    assert torch.isfinite(x).all() and not torch.isfinite((x * x).half()).all()
    # The case bites a kernel that would scale the activation tile by g in float16, not the weight's.
    assert not torch.isfinite((x * g).half()).all()
    _assert_matches_reference(inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_zero_constant_and_wide_ranging_rows(dtype):
    inputs = _inputs(16, 48, 96, dtype=dtype, maker=rmsnorm_linear.degenerate_rows)
    out = fused.kernel_fn(**inputs)
    assert torch.equal(out[0], torch.zeros_like(out[0]))       # a zero row stays zero (rsqrt(eps) * 0)
    _assert_matches_reference(inputs)


def test_the_norm_weight_and_eps_are_applied():
    inputs = _inputs(9, 24, 40)
    plain = fused.kernel_fn(**{**inputs, "norm_weight": torch.ones(40)})
    assert not torch.allclose(plain, fused.kernel_fn(**inputs), atol=1e-3)
    tiny = {**inputs, "x": inputs["x"] * 1e-4}
    assert not torch.allclose(fused.kernel_fn(**tiny), fused.kernel_fn(**{**tiny, "eps": 1e-2}), atol=1e-3)
    _assert_matches_reference({**tiny, "eps": 1e-2})


def test_ragged_edges_and_a_k_tail():
    # No size is a multiple of a block: masked K tail, wrapped rows and columns.
    _assert_matches_reference(_inputs(37, 70, 150, dtype=torch.float16))
    _assert_matches_reference(_inputs(3, 5, 1))


def test_strided_inputs_are_read_through_their_strides():
    inputs = _inputs(11, 24, 40)
    inputs["x"] = torch.cat([inputs["x"], inputs["x"]], dim=1)[:, ::2]
    inputs["weight"] = inputs["weight"].T.contiguous().T
    inputs["norm_weight"] = torch.stack([inputs["norm_weight"]] * 2, dim=1)[:, 0]
    assert not any(inputs[name].is_contiguous() for name in ("x", "weight", "norm_weight"))
    _assert_matches_reference(inputs)


def _combinations():
    """The first choice of every tunable, the last, and two random picks (fixed seed)."""
    choices = fused.TUNABLE_CHOICES
    rng = random.Random(0)
    return [{k: v[0] for k, v in choices.items()}, {k: v[-1] for k, v in choices.items()},
            *({k: rng.choice(v) for k, v in choices.items()} for _ in range(2))]


@pytest.mark.parametrize("combination", _combinations(), ids=["first", "last", "random-1", "random-2"])
def test_tunable_choices_stay_correct(monkeypatch, combination):
    for key, value in combination.items():
        monkeypatch.setitem(fused.TUNABLES, key, value)
    for m in (1, 40):
        _assert_matches_reference(_inputs(m, 48, 72, dtype=torch.bfloat16))


def test_every_tunable_has_choices_that_include_its_current_value():
    assert fused.TUNABLES.keys() == fused.TUNABLE_CHOICES.keys()
    for key, value in fused.TUNABLES.items():
        assert value in fused.TUNABLE_CHOICES[key], key


def test_empty_inputs_give_zeros_like_the_reference():
    inputs = _inputs(3, 4, 0)
    assert torch.equal(fused.kernel_fn(**inputs), reference.rmsnorm_linear(**inputs))


def test_bad_inputs_get_clear_errors():
    inputs = _inputs(4, 8, 12)
    with pytest.raises(ValueError, match=r"expected norm_weight \(12,\) and weight \(N, 12\)"):
        fused.kernel_fn(inputs["x"], inputs["norm_weight"], inputs["weight"].T)
    with pytest.raises(TypeError, match="share one dtype"):
        fused.kernel_fn(inputs["x"], inputs["norm_weight"].half(), inputs["weight"])
    with pytest.raises(ValueError, match="expected 2-D x"):
        fused.kernel_fn(inputs["x"][None], inputs["norm_weight"], inputs["weight"])
