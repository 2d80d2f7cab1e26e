"""The fused MLP starter beyond what the judge checks: activations, weight layouts, TMA and pointer paths, tile configs."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import random

import pytest
import torch

import reference
from autokernel.core.dtypes import TOLERANCES as TOLERANCE
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel

mlp, _ = load_kernel(starter_path("fused_mlp"))


def _mlp_inputs(tokens, dim, hidden, dtype=torch.float32, x_scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((tokens, dim), generator=gen) * x_scale
    w_gate, w_up = (torch.randn((hidden, dim), generator=gen) / dim ** 0.5 for _ in range(2))
    w_down = torch.randn((dim, hidden), generator=gen) / hidden ** 0.5
    return [t.to(dtype) for t in (x, w_gate, w_up, w_down)]


def _assert_matches_reference(x, w_gate, w_up, w_down, activation="silu"):
    out = mlp.kernel_fn(x, w_gate, w_up, w_down, activation=activation)
    expected = reference.fused_mlp(x.double(), w_gate.double(), w_up.double(), w_down.double(), activation)
    tol = TOLERANCE[x.dtype]
    assert out.dtype == x.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu2"])
def test_each_activation_matches_the_reference(activation):
    # x scaled by 3 puts pre-activations in the tails and around zero, where the activations differ most.
    _assert_matches_reference(*_mlp_inputs(19, 40, 72, x_scale=3.0), activation=activation)


def test_the_activations_are_told_apart():
    inputs = _mlp_inputs(8, 32, 48, x_scale=3.0)
    outputs = [mlp.kernel_fn(*inputs, activation=a) for a in ("silu", "gelu", "relu2")]
    assert not torch.allclose(outputs[0], outputs[1], atol=1e-3)
    assert not torch.allclose(outputs[0], outputs[2], atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_the_reference(dtype):
    _assert_matches_reference(*_mlp_inputs(21, 48, 80, dtype=dtype), activation="gelu")


def test_strided_activations_and_weights_are_read_through_their_strides():
    x, w_gate, w_up, w_down = _mlp_inputs(13, 40, 56)
    x = torch.cat([x, x], dim=1)[:, ::2]   # column stride 2
    w_gate = w_gate.T.contiguous().T       # (F, D) stored column-major
    w_down = w_down.T.contiguous().T
    assert not (x.is_contiguous() or w_gate.is_contiguous() or w_down.is_contiguous())
    _assert_matches_reference(x, w_gate, w_up, w_down, activation="relu2")


def test_the_pointer_path_agrees_with_the_tma_path(monkeypatch):
    inputs = _mlp_inputs(37, 48, 80, dtype=torch.float16, x_scale=2.0)
    assert all(mlp._engine_tma(t) for t in inputs)
    through_tma = mlp.kernel_fn(*inputs)
    monkeypatch.setattr(mlp, "_engine_tma", lambda t: False)
    torch.testing.assert_close(mlp.kernel_fn(*inputs), through_tma, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("gate_up", ["dual", "two_launch"])
def test_both_gate_up_plans_handle_ragged_edges_and_a_k_tail(monkeypatch, gate_up):
    monkeypatch.setitem(mlp.TUNABLES, "gate_up", gate_up)
    # No size is a multiple of a block, so both GEMMs have ragged tiles and a K tail.
    _assert_matches_reference(*_mlp_inputs(131, 70, 150, dtype=torch.float16))


def test_the_dual_plan_never_writes_the_gate_and_up_products(monkeypatch):
    launches = []
    original = mlp.engine_gemm
    monkeypatch.setattr(mlp, "engine_gemm", lambda *args, **kwargs: launches.append(kwargs) or original(*args, **kwargs))
    mlp.kernel_fn(*_mlp_inputs(16, 32, 48))
    assert len(launches) == 2 and launches[0].get("b2") is not None      # H in one launch, then the down projection


def _combinations():
    """The first choice of every tunable, the last, and two random picks (fixed seed)."""
    choices = mlp.TUNABLE_CHOICES
    rng = random.Random(0)
    return [{k: v[0] for k, v in choices.items()}, {k: v[-1] for k, v in choices.items()},
            *({k: rng.choice(v) for k, v in choices.items()} for _ in range(2))]


@pytest.mark.parametrize("combination", _combinations(), ids=["first", "last", "random-1", "random-2"])
def test_tunable_choices_stay_correct(monkeypatch, combination):
    for key, value in combination.items():
        monkeypatch.setitem(mlp.TUNABLES, key, value)
    _assert_matches_reference(*_mlp_inputs(23, 40, 72, dtype=torch.bfloat16))


def test_the_plan_choices_are_the_engines_plans():
    assert mlp.TUNABLE_CHOICES["gate_up_plan"][1:] == list(mlp.ENGINE_PLANS["dual"])
    assert mlp.TUNABLE_CHOICES["down_plan"][1:] == list(mlp.ENGINE_PLANS["plain"])


def test_every_tunable_has_choices_that_include_its_current_value():
    assert mlp.TUNABLES.keys() == mlp.TUNABLE_CHOICES.keys()
    for key, value in mlp.TUNABLES.items():
        assert value in mlp.TUNABLE_CHOICES[key], key


def test_bad_inputs_get_clear_errors():
    x, w_gate, w_up, w_down = _mlp_inputs(4, 8, 12)
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        mlp.kernel_fn(x, w_gate, w_up, w_down, activation="tanh")
    with pytest.raises(ValueError, match="expected w_gate and w_up"):
        mlp.kernel_fn(x, w_gate, w_up, w_down.T)
    with pytest.raises(TypeError, match="share one dtype"):
        mlp.kernel_fn(x, w_gate, w_up.half(), w_down)
