"""autokernel/kernel_types/matmul.py: the TF32 allowance matches what PyTorch's own float32 product carries, and
a linear's weight is transposed once."""

import pytest
import torch
from torch import nn

from autokernel.core.dtypes import pytorch_fp32_matmul_uses_tf32
from autokernel.kernel_types import matmul, registry
from autokernel.routing import routes


@pytest.fixture
def float32_matmul_precision():
    """Set torch's float32 matmul precision for one test, and put the caller's back afterwards."""
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)


def _cut_to_tf32(x: torch.Tensor, rounded: bool) -> torch.Tensor:
    """float32 x with the low 13 mantissa bits dropped (as the tensor cores read it) or rounded off."""
    bits = x.float().view(torch.int32).to(torch.int64)
    if rounded:
        bits = bits + 0x1000
    bits = (bits & ~0x1FFF) & 0xFFFFFFFF
    return torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32)


def _matmul_case(maker, m, n, k, seed):
    gen = torch.Generator().manual_seed(seed)
    inputs = maker({"M": m, "N": n, "K": k}, torch.float32, gen, "cpu")
    oracle = inputs["a"].double() @ inputs["b"].double()
    return inputs, oracle


MATMUL_CASES = [(matmul.matmul_inputs, 64, 48, 1), (matmul.matmul_inputs, 64, 48, 16),
                (matmul.matmul_inputs, 64, 48, 4096), (matmul.matmul_high_dynamic_range, 128, 96, 256),
                (matmul.matmul_high_dynamic_range, 32, 32, 8192)]


def test_no_tf32_allowance_at_pytorchs_default_precision_or_for_16_bit(float32_matmul_precision):
    float32_matmul_precision("highest")
    inputs, oracle = _matmul_case(matmul.matmul_inputs, 8, 8, 8, seed=0)
    assert registry.get("matmul").error_allowance(inputs, oracle, torch.float32) is None
    float32_matmul_precision("high")
    assert registry.get("matmul").error_allowance(inputs, oracle, torch.float16) is None
    assert registry.get("matmul").error_allowance(inputs, oracle, torch.float32).shape == oracle.shape


@pytest.mark.parametrize("precision", ["high", "medium"])
@pytest.mark.parametrize("rounded", [False, True], ids=["truncated", "rounded"])
@pytest.mark.parametrize("maker,m,n,k", [c[:4] for c in MATMUL_CASES],
                         ids=[f"{c[0].__name__}-{c[1]}x{c[2]}x{c[3]}" for c in MATMUL_CASES])
def test_a_tf32_product_stays_within_the_allowance(float32_matmul_precision, precision, rounded, maker, m, n, k):
    float32_matmul_precision(precision)
    inputs, oracle = _matmul_case(maker, m, n, k, seed=k)
    tf32 = _cut_to_tf32(inputs["a"], rounded).double() @ _cut_to_tf32(inputs["b"], rounded).double()
    allowance = registry.get("matmul").error_allowance(inputs, oracle, torch.float32)
    assert ((tf32 - oracle).abs() <= allowance).all()
    # TF32's error is real at these sizes: without the allowance the dtype tolerance alone would fail it.
    if k >= 16:
        rms = float(oracle.square().mean().sqrt())
        assert ((tf32 - oracle).abs() > 1e-4 * max(1.0, rms) + 1e-4 * oracle.abs()).any()


@pytest.mark.parametrize("maker,m,n,k", [c[:4] for c in MATMUL_CASES if c[3] >= 16],
                         ids=[f"{c[0].__name__}-{c[1]}x{c[2]}x{c[3]}" for c in MATMUL_CASES if c[3] >= 16])
def test_bfloat16_operands_are_not_excused(float32_matmul_precision, maker, m, n, k):
    float32_matmul_precision("high")
    inputs, oracle = _matmul_case(maker, m, n, k, seed=k)
    bf16 = inputs["a"].bfloat16().double() @ inputs["b"].bfloat16().double()
    allowance = registry.get("matmul").error_allowance(inputs, oracle, torch.float32)
    # 6-9% of the elements here, so any check of a few hundred elements fails a bfloat16 product.
    assert ((bf16 - oracle).abs() > allowance).float().mean() > 0.03


def test_the_tf32_allowance_grows_as_the_square_root_of_k(float32_matmul_precision):
    float32_matmul_precision("high")
    means = []
    for k in (1024, 4096):
        inputs, oracle = _matmul_case(matmul.matmul_inputs, 32, 32, k, seed=1)
        means.append(float(registry.get("matmul").error_allowance(inputs, oracle, torch.float32).mean()))
    assert 1.8 < means[1] / means[0] < 2.2


def test_the_per_backend_precision_api_is_followed_too(float32_matmul_precision):
    # Torch 2.9+: once torch.backends.cuda.matmul.fp32_precision is set, the legacy getter raises.
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert pytorch_fp32_matmul_uses_tf32()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert not pytorch_fp32_matmul_uses_tf32()


def test_linear_weights_are_transposed_once_until_they_change():
    layer = nn.Linear(8, 4, bias=False)
    first = matmul.transposed_weight(layer.weight, layer)
    assert torch.equal(first, layer.weight.t()) and first.is_contiguous()
    assert matmul.transposed_weight(layer.weight, layer) is first
    with torch.no_grad():
        layer.weight.mul_(2)
    second = matmul.transposed_weight(layer.weight, layer)
    assert second is not first and torch.equal(second, layer.weight.t())
    routes.forget_kept_tensors(layer)
    assert matmul.transposed_weight(layer.weight, layer) is not second


def test_a_linear_whose_transposed_rows_would_be_unaligned_hands_over_its_weights_view():
    head = nn.Linear(160, 203, bias=False).half()           # 203 half rows: 406 bytes, not a multiple of 16
    b = matmul.linear_b(head.weight, head)
    assert b.data_ptr() == head.weight.data_ptr() and b.stride() == (1, 160)
    assert matmul.TRANSPOSED_WEIGHT not in head.__dict__   # nothing kept: no copy of a vocabulary-sized weight
    aligned = nn.Linear(160, 208, bias=False).half()
    assert matmul.linear_b(aligned.weight, aligned).is_contiguous()
    narrow = nn.Linear(13, 203, bias=False).half()          # the weight's own rows unaligned too: the copy, as before
    assert matmul.linear_b(narrow.weight, narrow).is_contiguous()


def test_the_judge_draws_b_in_the_layout_the_router_hands_over():
    case = next(a for a in matmul.KERNEL_TYPE.adversarial if a.name == "a Linear's weight")
    inputs = case.make_inputs(case.shape, torch.float16, torch.Generator().manual_seed(0), "cpu")
    assert inputs["b"].shape == (case.shape["K"], case.shape["N"]) and inputs["b"].stride() == (1, case.shape["K"])
    assert (case.shape["N"] * 2) % 16                      # unaligned, as the heads that take this path
