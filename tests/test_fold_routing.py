"""Routing a norm folded into its consumers (rmsnorm_linear): only where sound, checked first, eager and compiled."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.core import patching
from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL, NOT_MEASURED  # noqa: E402
from autokernel.routing.outputs import output_error, tolerance  # noqa: E402
from tests.test_plugin import (LLAMA_SHAPES, SEQ, kernel_stats, one_forward_stats, recorded_calls,  # noqa: E402
                               reference_sources, tiny_llama, write_optimized)
from tests.plugin_helpers import recording_backend  # noqa: E402

# The tiny LLaMA's linears that can follow a norm: q / k / v (64 -> 64), gate / up (64 -> 176), lm_head (64 -> 128).
FOLD_SHAPES = [{"M": SEQ, "N": n, "K": 64} for n in (64, 176, 128)]


def _folds(model) -> dict:
    return {fold["norm"]: (fold["consumers"], fold["rejected"]) for fold in plugin.router_of(model).summary()["folds"]}


def _plugged_stats(model, inputs, folder) -> dict:
    """Plug the folder into the model: its output holds before and after one counted forward; that forward's stats."""
    expected = model(*inputs)
    plugin.plug_in(model, folder, policy=ALL)
    assert output_error(expected, model(*inputs)) <= tolerance(expected)
    stats = one_forward_stats(model, inputs)
    assert output_error(expected, model(*inputs)) <= tolerance(expected)
    return stats


def test_llama_norms_fold_into_their_linears_with_the_starter_and_the_output_holds(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": FOLD_SHAPES})
    with torch.no_grad():
        # q, k, v; gate and up (no fused_mlp kernel replaces the MLP here); the lm_head.
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_linear": (6, 0)}
    assert _folds(model) == {
        "layers.0.attention_norm": (["layers.0.attention.q_proj", "layers.0.attention.k_proj",
                                     "layers.0.attention.v_proj"], None),
        "layers.0.mlp_norm": (["layers.0.mlp.gate_proj", "layers.0.mlp.up_proj"], None),
        "norm": (["lm_head"], None)}
    plugin.unplug(model)
    assert not any(patching.runs_of(module) or type(module) is not patching.original_class(type(module))
                   for module in model.modules())


def test_each_folded_linear_is_a_site_verify_can_time(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": FOLD_SHAPES})
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=ALL, keep_examples=True)
        for _ in range(3):
            model(*inputs)
        router = plugin.router_of(model)
        sites = {site.shape["N"]: site for site in router.sites.values() if site.kernel.kernel_type == "rmsnorm_linear"}
        # Calls per forward: q, k and v share a shape; gate and up another; the lm_head its own.
        assert {n: site.calls for n, site in sites.items()} == {64: 3, 176: 2, 128: 1}
        for site in sites.values():
            with router.bypassed():
                theirs = site.run_pytorch()
            assert output_error(theirs, site.run_ours()) <= tolerance(theirs)


def test_a_norm_feeding_a_module_another_kernel_replaces_is_not_folded(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": FOLD_SHAPES, "fused_mlp": LLAMA_SHAPES["fused_mlp"]},
                             sources=reference_sources("rmsnorm_linear", "fused_mlp"))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        assert output_error(expected, model(*inputs)) <= tolerance(expected)
        assert one_forward_stats(model, inputs) == {"rmsnorm_linear": (4, 0), "fused_mlp": (1, 0)}
    assert "layers.0.mlp_norm" not in _folds(model)
    # The fused MLP gets the normalized activation, not the raw one.
    x, *_ = recorded_calls(model, "fused_mlp")[-1]
    assert torch.allclose(x.pow(2).mean(-1), torch.ones(SEQ), atol=1e-3)


class RMSNorm(nn.Module):
    def __init__(self, dim, offset=0.0):
        super().__init__()
        self.eps, self.offset = 1e-6, offset
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        # offset=1 is Gemma's (1 + weight) norm: the same structure, another result.
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (self.offset + self.weight)


class Block(nn.Module):
    def __init__(self, offset=0.0, residual_from=None):
        super().__init__()
        self.norm, self.q, self.k = RMSNorm(16, offset), nn.Linear(16, 8, bias=False), nn.Linear(16, 8)
        self.residual_from = residual_from          # rows from which the norm's output is also added

    def forward(self, x):
        h = self.norm(x)
        out = self.q(h) * self.k(h)
        if self.residual_from is not None and x.shape[0] >= self.residual_from:
            out = out + h[:, :8]
        return out


def _block_folder(tmp_path, rows=(4, 6)):
    shapes = [{"M": m, "N": 8, "K": 16} for m in rows]
    return write_optimized(tmp_path / "opt", {"rmsnorm_linear": shapes}, sources=reference_sources("rmsnorm_linear"))


def test_a_norm_output_with_another_use_is_not_folded(tmp_path):
    torch.manual_seed(0)
    model, x = Block(residual_from=0), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _block_folder(tmp_path), policy=ALL)
        recorded_calls(model, "rmsnorm_linear").clear()
        assert torch.equal(model(x), expected)
    assert _folds(model) == {} and recorded_calls(model, "rmsnorm_linear") == []
    assert "outside a consumer" in plugin.router_of(model).folding.searched["norm"]


def test_a_fold_a_later_input_signature_refutes_is_off_for_good(tmp_path):
    torch.manual_seed(0)
    model = Block(residual_from=6)
    small, large = torch.randn(4, 16), torch.randn(6, 16)
    with torch.no_grad():
        expected_small, expected_large = model(small), model(large)
        plugin.plug_in(model, _block_folder(tmp_path), policy=ALL)
        assert output_error(expected_small, model(small)) <= tolerance(expected_small)
        assert _folds(model)["norm"] == (["q", "k"], None)
        assert output_error(expected_large, model(large)) <= tolerance(expected_large)
        assert "not confirmed at a later input signature" in _folds(model)["norm"][1]
        recorded_calls(model, "rmsnorm_linear").clear()
        assert torch.equal(model(small), expected_small)
    assert recorded_calls(model, "rmsnorm_linear") == []


def test_the_pair_is_checked_against_the_unfolded_forward_before_it_is_trusted(tmp_path):
    torch.manual_seed(0)
    model, x = Block(offset=1.0), torch.randn(4, 16)      # named RMSNorm, computes (1 + weight) * normalized x
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _block_folder(tmp_path), policy=ALL)
        assert torch.equal(model(x), expected)
        assert torch.equal(model(x), expected)
    consumers, rejected = _folds(model)["norm"]
    assert consumers == ["q", "k"] and "the folded result differs from the norm and q" in rejected


def test_a_fold_runs_only_where_every_consumer_routes(tmp_path):
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _block_folder(tmp_path))       # "measured", and nothing was measured
        assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
        assert kernel_stats(model)["rmsnorm_linear"]["fallback_reasons"] == {NOT_MEASURED: 2}
        plugin.plug_in(model, _block_folder(tmp_path, rows=(6,)), policy=ALL)   # 4 rows not verified
        assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
        assert kernel_stats(model)["rmsnorm_linear"]["fallback_reasons"] == {"shape M=4,N=8,K=16 not verified": 2}


def _compiled_llama_graph_ops(tmp_path, kernels: dict) -> tuple[list[str], object]:
    """The ops of the one graph torch.compile makes of the tiny LLaMA routed through these kernels
    (checked: one graph, no break, the output holds), and the routed model."""
    from torch._dynamo.utils import counters

    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", kernels)
    recording, graph_ops = recording_backend()

    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad():
            expected = model(*inputs)
            plugin.plug_in(model, folder, policy=ALL)
            model(*inputs)                    # the watched pass finds the folds,
            model(*inputs)                    # the next call decides and checks them
            compiled = torch.compile(model, backend=recording, fullgraph=True)
            assert output_error(expected, compiled(*inputs)) <= tolerance(expected)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    finally:
        torch._dynamo.reset()
    return graph_ops, model


def test_a_folded_llama_compiles_into_one_graph_with_the_fused_op(tmp_path):
    graph_ops, model = _compiled_llama_graph_ops(tmp_path, {"rmsnorm_linear": FOLD_SHAPES})
    fused = [op for op in graph_ops if op.startswith("autokernel.rmsnorm_linear")]
    assert len(fused) == 6
    # The norms are gone from the graph: no rsqrt is left of the three.
    assert not any("rsqrt" in op for op in graph_ops)
    assert all(route.handed is None for route in plugin.router_of(model).folding.routes.values())


def test_calls_needing_gradients_are_not_folded(tmp_path):
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 16)
    expected = model(x)
    plugin.plug_in(model, _block_folder(tmp_path), policy=ALL)
    assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
    assert "gradients" in next(iter(kernel_stats(model)["rmsnorm_linear"]["fallback_reasons"]))


class Counting(Block):
    """A forward with a side effect (as a model that appends to its key/value cache has)."""
    calls = 0

    def forward(self, x):
        Counting.calls += 1
        return super().forward(x)


def test_the_search_watches_the_real_first_forward_and_folds_from_the_next(tmp_path):
    torch.manual_seed(0)
    model, x = Counting(), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _block_folder(tmp_path), policy=ALL)
        Counting.calls = 0
        recorded_calls(model, "rmsnorm_linear").clear()
        assert torch.equal(model(x), expected)
        assert Counting.calls == 1 and recorded_calls(model, "rmsnorm_linear") == []     # run once, unfolded
        assert _folds(model) == {"norm": (["q", "k"], None)}
        assert output_error(expected, model(x)) <= tolerance(expected)
        assert Counting.calls == 2 and kernel_stats(model)["rmsnorm_linear"]["hits"] == 2


def test_the_profilers_plan_and_the_router_agree_on_the_folds(tmp_path):
    # The shapes the profiler plans for rmsnorm_linear are exactly the calls the router folds.
    from autokernel.core import hardware
    from autokernel.profile import profiler

    model, inputs = tiny_llama()
    with torch.no_grad():
        report = profiler.profile_model(model, inputs, warmup=1, iters=1)
    entry = next(e for e in profiler.build_plan(report, hardware.detect()).entries
                 if e.kernel_type == "rmsnorm_linear")
    assert entry.calls == 4      # q, k, v and the lm_head: the MLP's norm feeds a fused_mlp module
    shapes = {"rmsnorm_linear": entry.shapes, "fused_mlp": LLAMA_SHAPES["fused_mlp"]}
    folder = write_optimized(tmp_path / "opt", shapes, sources=reference_sources("fused_mlp"))
    with torch.no_grad():
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_linear": (entry.calls, 0), "fused_mlp": (1, 0)}


class SoftmaxToo(Block):
    """The norm's output also goes to a softmax that the function routing sends to a kernel."""

    def forward(self, x):
        h = self.norm(x)
        return self.q(h) * self.k(h) + torch.softmax(h, dim=-1)[:, :8]


def test_a_use_the_function_routing_takes_to_a_kernel_still_refutes_the_fold(tmp_path):
    torch.manual_seed(0)
    model, x = SoftmaxToo(), torch.randn(4, 16)
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": [{"M": 4, "N": 8, "K": 16}],
                                                "softmax": [{"M": 4, "N": 16}]},
                             sources=reference_sources("rmsnorm_linear", "softmax"))
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, folder, policy=ALL)
        for _ in range(2):
            assert output_error(expected, model(x)) <= tolerance(expected)
    assert kernel_stats(model)["softmax"]["hits"] == 2
    assert _folds(model) == {} and "softmax" in plugin.router_of(model).folding.searched["norm"]


def test_a_hugging_face_llamas_input_norms_fold_into_q_k_v(tmp_path):
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    from autokernel.profile.models import load_model

    loaded = load_model(hf="llama", device="cpu", input_shape=(1, 8), hf_overrides=dict(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4))
    model, inputs = loaded.model, loaded.inputs
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": [{"M": 8, "N": 64, "K": 64}]})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        for _ in range(2):
            assert output_error(expected, model(*inputs)) <= tolerance(expected)
    folds = _folds(model)
    assert folds["model.layers.0.input_layernorm"] == (
        [f"model.layers.0.self_attn.{name}_proj" for name in "qkv"], None)
    # The MLP's norm feeds a gated MLP (not verified here: its linears are folded only if shapes were);
    # the final norm's output is returned in the model's outputs and sliced: never folded.
    assert "model.norm" not in folds
    assert kernel_stats(model)["rmsnorm_linear"]["hits"] == 3
