"""autokernel/registry_folded.py: the folded types' adversarial inputs have the property each is named for (rmsnorm_mlp)."""

import torch

import reference
from autokernel import registry
from autokernel.kernel_types import rmsnorm_mlp as registry_folded

SHAPE = {"M": 16, "D": 256, "F": 128, "act": "silu"}


def _inputs(make, dtype=torch.float16, shape=SHAPE):
    return make(shape, dtype, torch.Generator().manual_seed(0), "cpu")


def test_huge_rows_overflow_half_precision_statistics_and_products():
    inputs = _inputs(registry_folded.rmsnorm_mlp_huge_rows)
    x, weight = inputs["x"], inputs["norm_weight"]
    assert torch.isfinite(x).all()
    assert (x.float().square().sum(dim=1) > torch.finfo(torch.float16).max).all()
    assert torch.isinf(x.square().sum(dim=1, dtype=torch.float16)).all()
    # x * norm_weight rounded to float16 (for the tensor cores) overflows too, in most rows.
    assert torch.isinf(x * weight).any(dim=1).float().mean() > 0.5


def test_zero_and_tiny_rows_put_eps_in_charge():
    inputs = _inputs(registry_folded.rmsnorm_mlp_zero_and_tiny_rows, dtype=torch.float32)
    mean_square = inputs["x"].square().mean(dim=1)
    assert mean_square[0] == 0
    assert (mean_square[1::3] < inputs["eps"] / 10).all()
    assert (mean_square[2::3] > 0.5).all()
    # With eps left out (or added outside the rsqrt), the tiny rows come out far from the reference.
    x, weight = inputs["x"].double(), inputs["norm_weight"].double()
    without_eps = x * torch.rsqrt(x.square().mean(dim=1, keepdim=True)) * weight
    assert not torch.allclose(without_eps[1::3], reference.rmsnorm(x, weight, inputs["eps"])[1::3], rtol=0.1)
    out = reference.rmsnorm_mlp(**{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
    assert torch.isfinite(out).all() and (out[0] == 0).all()


def test_large_norm_weight_drives_the_gate_into_the_tails():
    inputs = _inputs(registry_folded.rmsnorm_mlp_large_norm_weight, dtype=torch.float32, shape={**SHAPE, "F": 512})
    normed = reference.rmsnorm(inputs["x"], inputs["norm_weight"], inputs["eps"])
    gate = normed @ inputs["w_gate"].T
    assert (gate.abs() > 10).float().mean() > 0.5


def test_the_reference_is_the_norm_then_the_mlp():
    inputs = registry.get("rmsnorm_mlp").inputs(SHAPE, torch.float32, seed=3, device="cpu")
    normed = reference.rmsnorm(inputs["x"], inputs["norm_weight"], inputs["eps"])
    expected = reference.fused_mlp(normed, inputs["w_gate"], inputs["w_up"], inputs["w_down"], inputs["activation"])
    torch.testing.assert_close(reference.rmsnorm_mlp(**inputs), expected, rtol=0, atol=0)


def test_bytes_and_flops_count_the_norm_once_and_the_gemms():
    shape = {"M": 512, "D": 2048, "F": 5632, "act": "silu"}
    mlp = registry.get("fused_mlp")
    assert registry_folded.rmsnorm_mlp_bytes(shape, 2) == mlp.bytes_moved(shape, 2) + 2 * 2048
    assert registry_folded.rmsnorm_mlp_flops(shape) == mlp.flops(shape) + 4 * 512 * 2048
