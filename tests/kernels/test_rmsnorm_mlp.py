"""The RMSNorm + MLP starter beyond what the judge checks: the norm pass, activations, layouts, TMA and pointer paths, plans."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import random

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

norm_mlp, _ = load_kernel(starter_path("rmsnorm_mlp"))


def _inputs(tokens, dim, hidden, dtype=torch.float32, x_scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((tokens, dim), generator=gen) * x_scale
    norm_weight = 1 + 0.3 * torch.randn(dim, generator=gen)
    w_gate, w_up = (torch.randn((hidden, dim), generator=gen) / dim ** 0.5 for _ in range(2))
    w_down = torch.randn((dim, hidden), generator=gen) / hidden ** 0.5
    return [t.to(dtype) for t in (x, norm_weight, w_gate, w_up, w_down)]


def _assert_matches_reference(x, norm_weight, w_gate, w_up, w_down, eps=1e-6, activation="silu"):
    out = norm_mlp.kernel_fn(x, norm_weight, w_gate, w_up, w_down, eps=eps, activation=activation)
    expected = reference.rmsnorm_mlp(x.double(), norm_weight.double(), w_gate.double(), w_up.double(),
                                     w_down.double(), eps, activation)
    tol = TOLERANCE[x.dtype]
    assert out.dtype == x.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2"])
def test_each_activation_matches_the_reference(activation):
    _assert_matches_reference(*_inputs(19, 40, 72), activation=activation)


def test_the_output_does_not_depend_on_the_scale_of_a_row():
    # With eps = 0 the norm divides each row by its RMS: scaling rows of x by 1e-2 .. 1e3 changes nothing.
    x, *weights = _inputs(12, 48, 64)
    scaled = x * torch.logspace(-2, 3, 12)[:, None]
    torch.testing.assert_close(norm_mlp.kernel_fn(scaled, *weights, eps=0.0), norm_mlp.kernel_fn(x, *weights, eps=0.0),
                               atol=1e-5, rtol=1e-4)


def test_eps_is_added_to_the_mean_square_inside_the_root():
    x, *weights = _inputs(6, 32, 48)
    x[1::2] *= 1e-4          # mean square 1e-8: eps = 1e-6 decides these rows' scale
    x[0] = 0.0               # a zero row stays zero rather than 0 * inf
    for eps in (1e-6, 1e-2):
        _assert_matches_reference(x, *weights, eps=eps)
    out = norm_mlp.kernel_fn(x, *weights)
    assert (out[0] == 0).all()


def test_large_rows_do_not_overflow_in_float16():
    # Squares of 3e3 sum past float16's largest value within one row: the sum must be float32.
    _assert_matches_reference(*_inputs(9, 64, 96, dtype=torch.float16, x_scale=3e3))


def test_x_times_a_large_norm_weight_is_kept_within_float16():
    # x near 4e4 times a weight of 2 is past float16's largest value: the norm pass scales each row
    # by its rsqrt in float32 before the weight and before it rounds, so n stays small.
    x, norm_weight, *weights = _inputs(9, 64, 96, dtype=torch.float16)
    x[:, ::4] = 4e4
    norm_weight = (norm_weight * 0 + 2.0).to(torch.float16)
    assert torch.isinf(x * norm_weight).any()
    _assert_matches_reference(x, norm_weight, *weights)
    # Weights below 1 are not scaled up: the product stays as precise as x itself.
    _assert_matches_reference(x * 1e-4, norm_weight * 0.25, *weights)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_the_reference(dtype):
    _assert_matches_reference(*_inputs(21, 48, 80, dtype=dtype), activation="gelu")


def test_strided_activations_and_weights_are_read_through_their_strides():
    x, norm_weight, w_gate, w_up, w_down = _inputs(13, 40, 56)
    x = torch.cat([x, x], dim=1)[:, ::2]                          # column stride 2
    norm_weight = torch.stack([norm_weight, norm_weight], 1)[:, 0]  # stride 2
    w_gate = w_gate.T.contiguous().T                             # (F, D) stored column-major
    w_down = w_down.T.contiguous().T
    assert not (x.is_contiguous() or norm_weight.is_contiguous() or w_gate.is_contiguous())
    _assert_matches_reference(x, norm_weight, w_gate, w_up, w_down, activation="relu2")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_norm_pass_normalizes_first_and_the_gemms_take_its_output(monkeypatch, dtype):
    monkeypatch.setitem(norm_mlp.TUNABLES, "NORM_BLOCK", 16)     # rows of 70 take five blocks: a tail too
    launches, rows = [], []
    real_gemm, real_rows = norm_mlp.engine_gemm, norm_mlp._rmsnorm_rows
    monkeypatch.setattr(norm_mlp, "engine_gemm", lambda a, b, **kw: launches.append(a) or real_gemm(a, b, **kw))
    monkeypatch.setattr(norm_mlp, "_rmsnorm_rows", lambda *a: rows.append(a[0].shape) or real_rows(*a))
    x, *weights = _inputs(19, 70, 40, dtype=dtype, x_scale=3.0)
    x = x * torch.linspace(0.1, 10, 19, dtype=dtype)[:, None]      # rows of very different scales
    _assert_matches_reference(x, *weights)
    assert rows == [(19, 70)] and len(launches) == 2 and launches[0] is not x    # the dual GEMM, then down


def test_the_pointer_path_agrees_with_the_tma_path(monkeypatch):
    inputs = _inputs(37, 48, 80, dtype=torch.float16, x_scale=2.0)
    assert all(norm_mlp._engine_tma(t) for t in inputs if t.dim() == 2)
    through_tma = norm_mlp.kernel_fn(*inputs)
    monkeypatch.setattr(norm_mlp, "_engine_tma", lambda t: False)
    torch.testing.assert_close(norm_mlp.kernel_fn(*inputs), through_tma, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("gate_up", ["dual", "two_launch"])
def test_both_gate_up_plans_handle_ragged_edges_and_a_k_tail(monkeypatch, gate_up):
    monkeypatch.setitem(norm_mlp.TUNABLES, "gate_up", gate_up)
    # No size is a multiple of a block: ragged tiles, a K tail, and a norm row longer than one block.
    _assert_matches_reference(*_inputs(131, 70, 150, dtype=torch.float16))


def _combinations():
    """The first choice of every tunable, the last, and two random picks (fixed seed)."""
    choices = norm_mlp.TUNABLE_CHOICES
    rng = random.Random(0)
    return [{k: v[0] for k, v in choices.items()}, {k: v[-1] for k, v in choices.items()},
            *({k: rng.choice(v) for k, v in choices.items()} for _ in range(2))]


@pytest.mark.parametrize("combination", _combinations(), ids=["first", "last", "random-1", "random-2"])
def test_tunable_choices_stay_correct(monkeypatch, combination):
    for key, value in combination.items():
        monkeypatch.setitem(norm_mlp.TUNABLES, key, value)
    _assert_matches_reference(*_inputs(23, 40, 72, dtype=torch.bfloat16))


def test_the_plan_choices_are_the_engines_plans():
    assert norm_mlp.TUNABLE_CHOICES["gate_up_plan"][1:] == list(norm_mlp.ENGINE_PLANS["dual"])
    assert norm_mlp.TUNABLE_CHOICES["down_plan"][1:] == list(norm_mlp.ENGINE_PLANS["plain"])


def test_every_tunable_has_choices_that_include_its_current_value():
    assert norm_mlp.TUNABLES.keys() == norm_mlp.TUNABLE_CHOICES.keys()
    for key, value in norm_mlp.TUNABLES.items():
        assert value in norm_mlp.TUNABLE_CHOICES[key], key


def test_zero_sized_inputs_give_an_empty_or_zero_output():
    x, norm_weight, w_gate, w_up, w_down = _inputs(4, 8, 12)
    assert norm_mlp.kernel_fn(x[:0], norm_weight, w_gate, w_up, w_down).shape == (0, 8)
    assert (norm_mlp.kernel_fn(x, norm_weight, w_gate[:0], w_up[:0], w_down[:, :0]) == 0).all()


def test_bad_inputs_get_clear_errors():
    x, norm_weight, w_gate, w_up, w_down = _inputs(4, 8, 12)
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        norm_mlp.kernel_fn(x, norm_weight, w_gate, w_up, w_down, activation="tanh")
    with pytest.raises(ValueError, match=r"expected norm_weight \(8,\)"):
        norm_mlp.kernel_fn(x, norm_weight[:5], w_gate, w_up, w_down)
    with pytest.raises(ValueError, match="expected w_gate and w_up"):
        norm_mlp.kernel_fn(x, norm_weight, w_gate, w_up, w_down.T)
    with pytest.raises(ValueError, match="eps must be a number"):
        norm_mlp.kernel_fn(x, norm_weight, w_gate, w_up, w_down, eps=-1.0)
    with pytest.raises(TypeError, match="share one dtype"):
        norm_mlp.kernel_fn(x, norm_weight.half(), w_gate, w_up, w_down)
