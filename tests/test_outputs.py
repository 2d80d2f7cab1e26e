"""Tests for autokernel/routing/outputs.py: a model output's error relative to its scale, and its tolerance."""

import math

import pytest
import torch

from autokernel.routing.outputs import detached_copy, output_error, tolerance


def test_output_error_is_relative_to_the_output_scale():
    expected = torch.tensor([100.0, -200.0, 0.5])
    assert output_error(expected, expected + torch.tensor([0.0, 2.0, 0.0])) == pytest.approx(0.01)
    assert output_error((expected, {"ids": torch.tensor([1, 2])}), (expected, {"ids": torch.tensor([1, 2])})) == 0.0
    assert output_error(torch.tensor([float("inf"), float("nan")]), torch.tensor([float("inf"), float("nan")])) == 0.0
    assert output_error(expected, torch.tensor([100.0, float("nan"), 0.5])) == math.inf
    assert output_error(torch.tensor([1, 2]), torch.tensor([1, 3])) == math.inf
    assert output_error({"logits": expected, "extra": [expected]}, {"logits": expected}) == math.inf
    assert output_error(expected, expected.double()) == math.inf


def test_the_tolerance_follows_the_outputs_first_float_tensor():
    assert tolerance(torch.zeros(2, dtype=torch.float16)) == 1e-2
    assert tolerance({"ids": torch.tensor([1]), "logits": torch.zeros(1, dtype=torch.bfloat16)}) == 2e-2
    assert tolerance(torch.tensor([1, 2])) == 1e-4


def test_a_detached_copy_survives_the_original_being_overwritten():
    # CUDA-graph replays write their next output over the last one: a check must compare a copy.
    output = {"logits": torch.ones(3), "hidden": (torch.zeros(2),)}
    copy = detached_copy(output)
    output["logits"].fill_(5.0)
    assert output_error({"logits": torch.ones(3), "hidden": (torch.zeros(2),)}, copy) == 0.0


def test_a_float32_output_under_tf32_is_held_to_float16s_bar():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert tolerance(torch.zeros(2)) == 1e-2
        torch.set_float32_matmul_precision("highest")
        assert tolerance(torch.zeros(2)) == 1e-4
    finally:
        torch.set_float32_matmul_precision(before)


class _OnCuda:
    """A float32 output tensor's dtype and device as a GPU run has them (no GPU here to make one)."""
    dtype, device = torch.float32, torch.device("cuda")

    def is_floating_point(self):
        return True


def test_a_float32_model_with_convolutions_on_a_gpu_is_held_to_tf32s_bar(monkeypatch):
    from autokernel.routing import outputs

    convnet = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    assert outputs.has_convolutions(convnet) and not outputs.has_convolutions(mlp)
    # On a CPU no cuDNN runs the convolutions: float32's own bar.
    assert tolerance(torch.zeros(2), convnet) == 1e-4
    monkeypatch.setattr(outputs, "tensors_of", lambda output: [_OnCuda()])
    before = torch.backends.cudnn.conv.fp32_precision
    try:
        torch.backends.cudnn.conv.fp32_precision = "tf32"        # PyTorch's default
        assert tolerance(object(), convnet) == 1e-2
        assert tolerance(object(), mlp) == 1e-4 and tolerance(object()) == 1e-4
        torch.backends.cudnn.conv.fp32_precision = "ieee"        # a user who turned TF32 off for convolutions
        assert tolerance(object(), convnet) == 1e-4
    finally:
        torch.backends.cudnn.conv.fp32_precision = before
