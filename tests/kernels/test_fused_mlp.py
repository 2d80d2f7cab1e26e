"""The fused MLP starter beyond what the judge checks: activations, weight layouts, TMA and pointer paths, tile configs."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import random

import pytest
import torch

import reference
from autokernel.correctness import TOLERANCES as TOLERANCE
from autokernel.paths import starter_path
from autokernel.worker import load_kernel

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


def test_the_gate_epilogue_launch_has_its_own_width_and_depth(monkeypatch):
    monkeypatch.setitem(mlp.TUNABLES, "large_min_tiles", 1)
    epilogue = mlp._tile_config(4096, 11008, gate_epilogue=True)
    assert (epilogue["BLOCK_N"], epilogue["num_stages"]) == (mlp.TUNABLES["EPILOGUE_BLOCK_N"],
                                                             mlp.TUNABLES["epilogue_num_stages"])
    plain = mlp._tile_config(4096, 4096, gate_epilogue=False)
    assert (plain["BLOCK_N"], plain["num_stages"]) == (mlp.TUNABLES["BLOCK_N"], mlp.TUNABLES["num_stages"])
    monkeypatch.setitem(mlp.TUNABLES, "large_min_tiles", 10**9)
    assert mlp._tile_config(4096, 4096, gate_epilogue=False)["BLOCK_M"] == mlp.TUNABLES["SMALL_BLOCK_M"]


def test_tma_is_used_only_where_the_copy_engine_can_describe_the_operand():
    aligned = torch.empty(8, 40, dtype=torch.float16)          # 80-byte rows
    assert mlp._tma_ready(aligned)
    assert not mlp._tma_ready(torch.empty(8, 70, dtype=torch.float16))   # 140-byte rows
    assert not mlp._tma_ready(aligned.T.contiguous().T)       # column-major
    assert not mlp._tma_ready(torch.empty(8 * 40 + 1, dtype=torch.float16)[1:].view(8, 40))  # 2-byte offset


def test_the_pointer_path_agrees_with_the_tma_path(monkeypatch):
    inputs = _mlp_inputs(37, 48, 80, dtype=torch.float16, x_scale=2.0)
    assert all(mlp._tma_ready(t) for t in inputs)
    through_tma = mlp.kernel_fn(*inputs)
    monkeypatch.setattr(mlp, "_tma_ready", lambda *tensors: False)
    torch.testing.assert_close(mlp.kernel_fn(*inputs), through_tma, atol=2e-3, rtol=2e-3)


def test_each_program_walks_several_tiles_under_the_interpreter(monkeypatch):
    # 3 programs over 4 x 3 tiles: the persistent loop, not one tile per program, covers the output.
    monkeypatch.setitem(mlp.TUNABLES, "large_min_tiles", 10**9)
    x, w_gate, w_up, w_down = _mlp_inputs(4 * mlp.TUNABLES["SMALL_BLOCK_M"], 16, 3 * mlp.TUNABLES["SMALL_BLOCK_N"])
    assert mlp.INTERPRETER_PROGRAMS < 12
    _assert_matches_reference(x, w_gate, w_up, w_down)


@pytest.mark.parametrize("large_min_tiles", [1, 10**9], ids=["big-tile config", "small-tile config"])
def test_both_configs_handle_ragged_edges_and_a_k_tail(monkeypatch, large_min_tiles):
    monkeypatch.setitem(mlp.TUNABLES, "large_min_tiles", large_min_tiles)
    # No size is a multiple of a block, so both GEMMs take their masked paths.
    _assert_matches_reference(*_mlp_inputs(131, 70, 150, dtype=torch.float16))


def _combinations():
    """The smallest choice of every tunable, the largest, and two random picks (fixed seed)."""
    choices = mlp.TUNABLE_CHOICES
    rng = random.Random(0)
    return [{k: min(v) for k, v in choices.items()}, {k: max(v) for k, v in choices.items()},
            *({k: rng.choice(v) for k, v in choices.items()} for _ in range(2))]


@pytest.mark.parametrize("combination", _combinations(), ids=["smallest", "largest", "random-1", "random-2"])
def test_tunable_choices_stay_correct_in_both_configs(monkeypatch, combination):
    for key, value in combination.items():
        monkeypatch.setitem(mlp.TUNABLES, key, value)
    inputs = _mlp_inputs(23, 40, 72, dtype=torch.bfloat16)
    _assert_matches_reference(*inputs)
    monkeypatch.setitem(mlp.TUNABLES, "large_min_tiles", 1)
    _assert_matches_reference(*inputs)


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
