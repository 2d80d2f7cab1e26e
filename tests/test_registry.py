"""The registry is complete and self-consistent: every type has a reference, a starter and sane shapes."""

import pytest
import torch

from autokernel.core.paths import starter_path
from autokernel.judge.correctness import output_parts
from autokernel.kernel_types import registry

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
        outputs = output_parts(kt.reference(**{k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point()
                                                else v for k, v in inputs.items()}))
        out = outputs[0]          # the values, where the reference returns values and indices
        assert all(part.is_floating_point() or part.dtype == torch.int64 for part in outputs)
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
    for shapes in (attn.sweep, attn.cpu_sweep):
        # the wide blocks (128 < D <= 256) and the scores kept in memory (D above 256)
        assert any(128 < s["D"] <= 256 for s in shapes) and any(s["D"] > 256 for s in shapes)
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
