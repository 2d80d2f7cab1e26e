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


def test_a_float32_output_is_held_to_4x_pytorchs_own_tf32_error_up_to_float16s_bar():
    assert tolerance(torch.zeros(2)) == 1e-4
    assert tolerance(torch.zeros(2), own_error=1e-5) == 1e-4                 # float32's own bar is the floor
    assert tolerance(torch.zeros(2), own_error=3e-4) == pytest.approx(1.2e-3)
    assert tolerance(torch.zeros(2), own_error=0.5) == 1e-2                  # never looser than float16's


class _ByConvolutionPrecision(torch.nn.Module):
    """Stands for a float32 convolution net on a GPU: its output moves by 3e-4 when cuDNN's convolutions use TF32."""

    def forward(self, x):
        return x * (1 + 3e-4 if torch.backends.cudnn.conv.fp32_precision == "tf32" else 1.0)


def test_pytorchs_own_tf32_convolution_error_is_measured_against_exact_convolutions(monkeypatch):
    from autokernel.routing import outputs

    model, x = _ByConvolutionPrecision(), torch.ones(4)
    before = torch.backends.cudnn.conv.fp32_precision
    try:
        torch.backends.cudnn.conv.fp32_precision = "tf32"         # PyTorch's default
        as_pytorch_ran_it = model(x)
        assert outputs.tf32_convolution_error(model, (x,), as_pytorch_ran_it) == 0.0     # on a CPU: none made
        monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")))
        error = outputs.tf32_convolution_error(model, (x,), as_pytorch_ran_it)
        monkeypatch.undo()
        assert error == pytest.approx(3e-4, rel=1e-3)
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"   # the user's setting, as it was
        assert torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cudnn.conv.fp32_precision = before
