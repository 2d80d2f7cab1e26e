"""Tests for autokernel/routing/router.py: one decision per call signature, function routing only where it is needed."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.core import patching
from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL, call_signature  # noqa: E402
from tests.test_plugin import LLAMA_SHAPES, SEQ, reference_sources, tiny_llama, write_optimized  # noqa: E402


def llama_with_stand_ins(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES, sources=reference_sources(*LLAMA_SHAPES))
    plugin.plug_in(model, folder, policy=ALL)
    return model, inputs, plugin.router_of(model)


def test_each_call_signature_is_resolved_once(tmp_path):
    model, inputs, router = llama_with_stand_ins(tmp_path)
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
    first = dict(router.resolutions)
    # Every routed module and the one SDPA call, each decided once over three forward passes.
    assert set(first.values()) == {1}
    assert "torch.nn.functional.scaled_dot_product_attention" in first
    assert "module layers.0.attention.q_proj (Linear)" in first and "module norm (RMSNorm)" in first
    with torch.no_grad():
        model(inputs[0][:, :5])           # a new sequence length: new signatures, decided once more
        model(inputs[0][:, :5])
    assert {route: router.resolutions[route] for route in first} == dict.fromkeys(first, 2)
    # The fused MLP is not verified at 5 rows: it runs its own forward, whose linears are then decided.
    assert router.resolutions["module layers.0.mlp.up_proj (Linear)"] == 1
    with torch.enable_grad():             # gradients on: another signature (and a fallback)
        model(*inputs)
    assert {route: router.resolutions[route] for route in first} == dict.fromkeys(first, 3)


def test_the_function_routing_is_on_only_in_modules_that_call_routed_functions(tmp_path):
    model, inputs, router = llama_with_stand_ins(tmp_path)
    with torch.no_grad():
        model(*inputs)                    # the resolution pass watches the whole model
        router.intercepted = 0
        model(*inputs)
    assert router.summary()["scoped_modules"] == ["layers.0.attention"]
    # Only the attention's own torch calls pass through the routing mode (its views, transposes and
    # SDPA), not the rest of the model, nor the code of the modules it calls.
    assert 0 < router.intercepted <= 12
    assert [run.method for run in patching.runs_of(model.layers[0].attention)] == ["run_scoped"]


def test_bypassed_routing_runs_pytorch_everywhere(tmp_path):
    model, inputs, router = llama_with_stand_ins(tmp_path)
    with torch.no_grad():
        model(*inputs)
        router.reset_stats()
        with router.bypassed():
            model(*inputs)
    assert all(s.hits == 0 and s.fallbacks == 0 for s in router.stats.values())


def test_a_call_signature_covers_what_a_decision_depends_on():
    x = torch.randn(4, 8)
    base = call_signature((x, -1), {})
    assert call_signature((torch.randn(4, 8), -1), {}) == base         # other values, same decision
    assert call_signature((x.t(), -1), {}) != base                      # other shape and strides
    assert call_signature((x.half(), -1), {}) != base
    assert call_signature((x, -1), {"dtype": torch.float32}) != base
    with torch.no_grad():
        assert call_signature((x, -1), {}) != base


class Scores(nn.Module):
    def forward(self, x):
        return F.softmax(x, dim=-1) + torch.softmax(x * 2, -1)


def test_function_routes_in_the_models_own_forward(tmp_path):
    model, x = Scores(), torch.randn(3, 8)
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 3, "N": 8}]}, sources=reference_sources("softmax"))
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, folder, policy=ALL)
        torch.testing.assert_close(model(x), expected)
        router = plugin.router_of(model)
        router.reset_stats()
        model(x)
    assert router.summary()["scoped_modules"] == [""]
    assert router.stats["1_softmax"].hits == 2
    assert router.resolutions == {"torch.nn.functional.softmax": 1, "torch.softmax": 1}
    assert len(router.sites) == 1 and next(iter(router.sites.values())).calls == 2
    assert SEQ  # the shared fixtures stay importable


LIMITED_ATTENTION = '''"""A stand-in attention kernel with a head-dim limit, as the starter has (MAX_HEAD_DIM)."""
import reference

KERNEL_TYPE = "flash_attention"


def kernel_fn(q, k, v, causal=False, sm_scale=None):
    if q.shape[-1] > 8:
        raise ValueError(f"head_dim {q.shape[-1]} is above the 8 this kernel takes")
    return reference.flash_attention(q, k, v, causal, sm_scale)
'''


class Attend(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_a_kernel_that_raises_at_a_shape_falls_back_there_saying_why(tmp_path):
    shapes = [{"B": 1, "H": 2, "S": 4, "D": d, "causal": 1} for d in (8, 16)]
    folder = write_optimized(tmp_path / "opt", {"flash_attention": shapes},
                             sources={"flash_attention": LIMITED_ATTENTION})
    model = Attend()
    small, wide = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 16)
    with torch.no_grad():
        expected = model(wide)
        plugin.plug_in(model, folder, policy=ALL)
        torch.testing.assert_close(model(small), Attend()(small))
        torch.testing.assert_close(model(wide), expected)       # no exception: PyTorch ran it
        model(wide)
    stats = plugin.router_of(model).stats["1_flash_attention"]
    assert stats.hits == 1 and stats.fallbacks == 2
    assert dict(stats.reasons) == {"the kernel raised ValueError: head_dim 16 is above the 8 this kernel takes": 2}
