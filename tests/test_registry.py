"""The registry is complete and self-consistent: every type has a reference, a starter and sane shapes."""

import pytest
import torch

from autokernel import registry
from autokernel.kernel_types import matmul
from autokernel.paths import starter_path

TYPES = list(registry.REGISTRY)


def test_the_kernel_types():
    assert set(TYPES) == {"matmul", "softmax", "layernorm", "rmsnorm", "rmsnorm_linear", "flash_attention",
                          "fused_mlp", "rmsnorm_mlp", "cross_entropy", "rotary_embedding", "reduce"}


@pytest.mark.parametrize("name", TYPES)
def test_every_type_has_a_starter_naming_it(name):
    source = starter_path(name).read_text()
    assert f'KERNEL_TYPE = "{name}"' in source
    assert "def kernel_fn(" in source and "TUNABLES = {" in source and "TUNABLE_CHOICES = {" in source


@pytest.mark.parametrize("name", TYPES)
def test_sweeps_have_the_promised_sizes(name):
    kt = registry.get(name)
    assert 8 <= len(kt.sweep) <= 10
    assert 8 <= len(kt.cpu_sweep) <= 10
    assert kt.timing_shape in kt.sweep
    sizes = {v for shape in kt.edge_shapes for v in shape.values() if isinstance(v, int)}
    cpu_sizes = {v for shape in kt.cpu_edge_shapes for v in shape.values() if isinstance(v, int)}
    for required in (1023, 4097, 1537, 1):
        assert required in sizes, f"{name}: GPU edge shapes lack {required}"
        assert required in cpu_sizes, f"{name}: CPU edge shapes lack {required}"
    assert kt.adversarial


@pytest.mark.parametrize("name", TYPES)
def test_inputs_are_reproducible_fresh_and_not_zero(name):
    kt = registry.get(name)
    a = kt.inputs(kt.smoke_shape, torch.float32, seed=7, device="cpu")
    b = kt.inputs(kt.smoke_shape, torch.float32, seed=7, device="cpu")
    c = kt.inputs(kt.smoke_shape, torch.float32, seed=8, device="cpu")
    tensors = [k for k, v in a.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
    assert tensors
    for key in tensors:
        assert torch.equal(a[key], b[key])
        assert a[key].abs().sum() > 0
    assert any(not torch.equal(a[key], c[key]) for key in tensors)


@pytest.mark.parametrize("name", TYPES)
def test_reference_runs_on_every_adversarial_input(name):
    kt = registry.get(name)
    for adversarial in kt.adversarial:
        shape = {**kt.smoke_shape, **adversarial.shape}
        gen = torch.Generator().manual_seed(0)
        inputs = adversarial.make_inputs(shape, torch.float16, gen, "cpu")
        out = kt.reference(**{k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                              for k, v in inputs.items()})
        if "nan and inf" in adversarial.name:     # max / min must propagate them: some outputs are not finite
            assert out.isnan().any() and out.isinf().any() and out.isfinite().any(), adversarial.name
            continue
        assert torch.isfinite(out).all(), f"{name}/{adversarial.name}: the oracle itself is not finite"


def test_bytes_and_flops_formulas():
    mm = registry.get("matmul")
    shape = {"M": 128, "N": 256, "K": 64}
    assert mm.flops(shape) == 2 * 128 * 256 * 64
    assert mm.bytes_moved(shape, 2) == (128 * 64 + 64 * 256 + 128 * 256) * 2
    attn = registry.get("flash_attention")
    causal = {"B": 1, "H": 2, "S": 128, "D": 64, "causal": 1}
    assert attn.flops(causal) == attn.flops({**causal, "causal": 0}) / 2
    # Grouped-query attention reads its 4 key/value heads once: q and the output move 16 heads each.
    gqa = {"B": 2, "H": 16, "KV": 4, "S": 128, "D": 64}
    assert attn.bytes_moved(gqa, 2) == (2 * 16 + 2 * 4) * 2 * 128 * 64 * 2
    assert attn.bytes_moved({**gqa, "KV": 16}, 2) == attn.bytes_moved({k: v for k, v in gqa.items() if k != "KV"}, 2)
    assert registry.get("softmax").bytes_moved({"M": 10, "N": 20}, 4) == 2 * 10 * 20 * 4


def test_attention_covers_grouped_and_multi_query_heads_and_wide_head_dims():
    attn = registry.get("flash_attention")
    for shapes in (attn.sweep, attn.cpu_sweep, attn.edge_shapes, attn.cpu_edge_shapes):
        kv_heads = [s["KV"] for s in shapes if "KV" in s]
        assert any(kv == 1 for kv in kv_heads) and any(kv > 1 for kv in kv_heads)
        assert all(s["H"] % s.get("KV", s["H"]) == 0 for s in shapes)
    assert max(s["D"] for s in attn.sweep) == max(s["D"] for s in attn.cpu_sweep) == 256
    inputs = attn.inputs({"B": 2, "H": 6, "KV": 2, "S": 8, "D": 16}, torch.float32, seed=0, device="cpu")
    assert inputs["q"].shape == (2, 6, 8, 16) and inputs["k"].shape == inputs["v"].shape == (2, 2, 8, 16)


def test_shape_strings_round_trip():
    shape = registry.parse_shape("M=4096,D=4096,F=11008,act=silu,sm_scale=0.125")
    assert shape == {"M": 4096, "D": 4096, "F": 11008, "act": "silu", "sm_scale": 0.125}
    assert registry.parse_shape(registry.format_shape(shape)) == shape
    with pytest.raises(ValueError, match="NAME=VALUE"):
        registry.parse_shape("4096x4096")
    with pytest.raises(KeyError, match="known types"):
        registry.get("conv2d")


# --------------------------------------------------------------------------- matmul's TF32 allowance
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
    assert matmul.pytorch_fp32_matmul_uses_tf32()
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    assert not matmul.pytorch_fp32_matmul_uses_tf32()


@pytest.mark.parametrize("old, new", [
    ({"M": 6, "N": 10, "dim": -1, "op": "max"}, {"O": 6, "R": 10, "I": 1, "op": "max"}),
    ({"M": 6, "N": 10, "dim": 0, "op": "sum"}, {"O": 1, "R": 6, "I": 10, "op": "sum"}),
])
def test_reduce_shapes_of_the_old_form_read_as_their_layout(old, new):
    # Plans and manifests written when only a leading or trailing dim could be reduced stay valid.
    reduce = registry.get("reduce")
    assert registry.canonical_shape("reduce", old) == new
    assert registry.canonical_shape("matmul", {"M": 1, "N": 2, "K": 3}) == {"M": 1, "N": 2, "K": 3}
    a, b = (reduce.inputs(shape, torch.float32, seed=3, device="cpu") for shape in (old, new))
    assert torch.equal(a["x"], b["x"]) and a["dim"] == b["dim"] and a["op"] == b["op"]
    assert reduce.bytes_moved(old, 4) == reduce.bytes_moved(new, 4) and reduce.flops(old) == reduce.flops(new)


def test_reduce_inputs_take_the_2d_forms_where_they_suffice():
    # (O, R) over -1 when I is 1 and (R, I) over 0 when O is 1: what every reduce kernel file took;
    # (O, R, I) over 1 otherwise.
    reduce = registry.get("reduce")
    for shape, sizes, dim in [({"O": 4, "R": 5, "I": 1}, (4, 5), -1), ({"O": 1, "R": 5, "I": 3}, (5, 3), 0),
                              ({"O": 2, "R": 5, "I": 3}, (2, 5, 3), 1), ({"O": 1, "R": 1, "I": 1}, (1, 1), -1)]:
        inputs = reduce.inputs({**shape, "op": "mean"}, torch.float32, seed=0, device="cpu")
        assert tuple(inputs["x"].shape) == sizes and inputs["dim"] == dim
        assert reduce.reference(**inputs).numel() == shape["O"] * shape["I"]
