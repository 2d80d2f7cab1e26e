"""Routing a norm folded into its consumers (rmsnorm_linear): only where sound, checked first, eager and compiled."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel import plugin, registry  # noqa: E402
from autokernel.kernel_types import fused_mlp, rmsnorm_mlp  # noqa: E402
from autokernel.decisions import NOT_MEASURED  # noqa: E402
from tests.test_plugin import (LLAMA_SHAPES, SEQ, kernel_stats, one_forward_stats, recorded_calls,  # noqa: E402
                               reference_sources, tiny_llama, write_optimized)

# The tiny LLaMA's linears that can follow a norm: q / k / v (64 -> 64), gate / up (64 -> 176), lm_head (64 -> 128).
FOLD_SHAPES = [{"M": SEQ, "N": n, "K": 64} for n in (64, 176, 128)]


def _folds(model) -> dict:
    return {fold["norm"]: (fold["consumers"], fold["rejected"]) for fold in plugin.router_of(model).summary()["folds"]}


def _plugged_stats(model, inputs, folder) -> dict:
    """Plug the folder into the model: its output holds before and after one counted forward; that forward's stats."""
    expected = model(*inputs)
    plugin.plug_in(model, folder, policy=plugin.ALL)
    assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
    stats = one_forward_stats(model, inputs)
    assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
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
    assert not any("forward" in vars(module) for module in model.modules())


def test_each_folded_linear_is_a_site_verify_can_time(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": FOLD_SHAPES})
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=plugin.ALL, keep_examples=True)
        for _ in range(3):
            model(*inputs)
        router = plugin.router_of(model)
        sites = {site.shape["N"]: site for site in router.sites.values() if site.kernel.kernel_type == "rmsnorm_linear"}
        # Calls per forward: q, k and v share a shape; gate and up another; the lm_head its own.
        assert {n: site.calls for n, site in sites.items()} == {64: 3, 176: 2, 128: 1}
        for site in sites.values():
            with router.bypassed():
                theirs = site.run_pytorch()
            assert plugin.output_error(theirs, site.run_ours()) <= plugin.tolerance(theirs)


def test_a_norm_feeding_a_module_another_kernel_replaces_is_not_folded(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": FOLD_SHAPES, "fused_mlp": LLAMA_SHAPES["fused_mlp"]},
                             sources=reference_sources("rmsnorm_linear", "fused_mlp"))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=plugin.ALL)
        assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
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
        plugin.plug_in(model, _block_folder(tmp_path), policy=plugin.ALL)
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
        plugin.plug_in(model, _block_folder(tmp_path), policy=plugin.ALL)
        assert plugin.output_error(expected_small, model(small)) <= plugin.tolerance(expected_small)
        assert _folds(model)["norm"] == (["q", "k"], None)
        assert plugin.output_error(expected_large, model(large)) <= plugin.tolerance(expected_large)
        assert "not confirmed at a later input signature" in _folds(model)["norm"][1]
        recorded_calls(model, "rmsnorm_linear").clear()
        assert torch.equal(model(small), expected_small)
    assert recorded_calls(model, "rmsnorm_linear") == []


def test_the_pair_is_checked_against_the_unfolded_forward_before_it_is_trusted(tmp_path):
    torch.manual_seed(0)
    model, x = Block(offset=1.0), torch.randn(4, 16)      # named RMSNorm, computes (1 + weight) * normalized x
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _block_folder(tmp_path), policy=plugin.ALL)
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
        plugin.plug_in(model, _block_folder(tmp_path, rows=(6,)), policy=plugin.ALL)   # 4 rows not verified
        assert torch.equal(model(x), expected) and torch.equal(model(x), expected)
        assert kernel_stats(model)["rmsnorm_linear"]["fallback_reasons"] == {"shape M=4,N=8,K=16 not verified": 2}


def _compiled_llama_graph_ops(tmp_path, kernels: dict) -> tuple[list[str], object]:
    """The ops of the one graph torch.compile makes of the tiny LLaMA routed through these kernels
    (checked: one graph, no break, the output holds), and the routed model."""
    from torch._dynamo.utils import counters

    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", kernels)
    graph_ops = []

    def recording_backend(graph_module, example_inputs):
        graph_ops.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return torch._dynamo.lookup_backend("aot_eager")(graph_module, example_inputs)

    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad():
            expected = model(*inputs)
            plugin.plug_in(model, folder, policy=plugin.ALL)
            model(*inputs)                    # the watched pass finds the folds,
            model(*inputs)                    # the next call decides and checks them
            compiled = torch.compile(model, backend=recording_backend, fullgraph=True)
            assert plugin.output_error(expected, compiled(*inputs)) <= plugin.tolerance(expected)
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
    plugin.plug_in(model, _block_folder(tmp_path), policy=plugin.ALL)
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
        plugin.plug_in(model, _block_folder(tmp_path), policy=plugin.ALL)
        Counting.calls = 0
        recorded_calls(model, "rmsnorm_linear").clear()
        assert torch.equal(model(x), expected)
        assert Counting.calls == 1 and recorded_calls(model, "rmsnorm_linear") == []     # run once, unfolded
        assert _folds(model) == {"norm": (["q", "k"], None)}
        assert plugin.output_error(expected, model(x)) <= plugin.tolerance(expected)
        assert Counting.calls == 2 and kernel_stats(model)["rmsnorm_linear"]["hits"] == 2


def test_the_profilers_plan_and_the_router_agree_on_the_folds(tmp_path):
    # The shapes the profiler plans for rmsnorm_linear are exactly the calls the router folds.
    from autokernel import hardware, profiler

    model, inputs = tiny_llama()
    with torch.no_grad():
        report = profiler.profile_model(model, inputs, warmup=1, iters=1)
    entry = next(e for e in profiler.build_plan(report, hardware.detect())["entries"]
                 if e["kernel_type"] == "rmsnorm_linear")
    assert entry["calls"] == 4      # q, k, v and the lm_head: the MLP's norm feeds a fused_mlp module
    shapes = {"rmsnorm_linear": entry["shapes"], "fused_mlp": LLAMA_SHAPES["fused_mlp"]}
    folder = write_optimized(tmp_path / "opt", shapes, sources=reference_sources("fused_mlp"))
    with torch.no_grad():
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_linear": (entry["calls"], 0), "fused_mlp": (1, 0)}


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
        plugin.plug_in(model, folder, policy=plugin.ALL)
        for _ in range(2):
            assert plugin.output_error(expected, model(x)) <= plugin.tolerance(expected)
    assert kernel_stats(model)["softmax"]["hits"] == 2
    assert _folds(model) == {} and "softmax" in plugin.router_of(model).folding.searched["norm"]


def test_a_hugging_face_llamas_input_norms_fold_into_q_k_v(tmp_path):
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    from autokernel.models import load_model

    loaded = load_model(hf="llama", device="cpu", input_shape=(1, 8), hf_overrides=dict(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4))
    model, inputs = loaded.model, loaded.inputs
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_linear": [{"M": 8, "N": 64, "K": 64}]})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=plugin.ALL)
        for _ in range(2):
            assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
    folds = _folds(model)
    assert folds["model.layers.0.input_layernorm"] == (
        [f"model.layers.0.self_attn.{name}_proj" for name in "qkv"], None)
    # The MLP's norm feeds a gated MLP (not verified here: its linears are folded only if shapes were);
    # the final norm's output is returned in the model's outputs and sliced: never folded.
    assert "model.norm" not in folds
    assert kernel_stats(model)["rmsnorm_linear"]["hits"] == 3


# --------------------------------------------------------------------------- rmsnorm_mlp: a norm folded into the whole MLP
MLP_FOLD_SHAPES = [{"M": SEQ, "D": 64, "F": 176, "act": "silu"}]


def test_the_mlp_norm_folds_into_the_whole_mlp_with_the_starter_and_the_output_holds(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": MLP_FOLD_SHAPES})
    with torch.no_grad():
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_mlp": (1, 0)}
    # Only the MLP's norm: the attention's feeds q / k / v, the last one the lm_head.
    assert _folds(model) == {"layers.0.mlp_norm": (["layers.0.mlp"], None)}
    assert plugin.router_of(model).folding.routes["layers.0.mlp_norm"].checked


def test_a_gated_mlp_on_the_raw_input_of_its_norm_reads_as_rmsnorm_mlp():
    model, _ = tiny_llama()
    norm, mlp = model.layers[0].mlp_norm, model.layers[0].mlp
    assert fused_mlp.is_gated_mlp_module(mlp) and not fused_mlp.is_gated_mlp_module(model.layers[0].attention)
    torch.manual_seed(2)
    x = torch.randn(1, SEQ, 64)
    reading = rmsnorm_mlp.read_rmsnorm_mlp(norm, mlp, x)
    assert reading.shape == {"M": SEQ, "D": 64, "F": 176, "act": "silu"}
    # The reference on the kernel's arguments is the norm, then the MLP.
    with torch.no_grad():
        torch.testing.assert_close(reading.launch(registry.get("rmsnorm_mlp").reference, x), mlp(norm(x)))
    assert rmsnorm_mlp.read_rmsnorm_mlp(norm, mlp, torch.randn(SEQ, 32)) == "input size differs from the norm's or the MLP's"


def test_an_mlps_activation_is_read_from_the_module_it_holds():
    class HoldsActivation(nn.Module):
        def __init__(self, act):
            super().__init__()
            self.act_fn = act
    assert fused_mlp.mlp_activation(HoldsActivation(nn.SiLU())) == "silu"
    # Hugging Face's own activation classes, by name.
    assert fused_mlp.mlp_activation(HoldsActivation(type("SiLUActivation", (nn.Module,), {})())) == "silu"
    assert fused_mlp.mlp_activation(HoldsActivation(type("GELUTanh", (nn.Module,), {})())) == "gelu"
    assert fused_mlp.mlp_activation(HoldsActivation(nn.GELU(approximate="tanh"))) == "gelu"
    # The exact GELU is no kernel's: its name goes into the shape, which then matches no verified shape.
    assert fused_mlp.mlp_activation(HoldsActivation(nn.GELU())) == "GELU"
    assert fused_mlp.mlp_activation(nn.Module()) == "silu"


def test_the_profiler_plans_rmsnorm_mlp_where_the_router_folds_it(tmp_path):
    # The tiny LLaMA of models/llama.py: the plan's rmsnorm_mlp shapes, verified by the starter,
    # are exactly the calls the router runs folded, and the model's output holds.
    from autokernel import hardware, profiler

    model, inputs = tiny_llama()
    with torch.no_grad():
        report = profiler.profile_model(model, inputs, warmup=1, iters=1)
    entry = next(e for e in profiler.build_plan(report, hardware.detect())["entries"]
                 if e["kernel_type"] == "rmsnorm_mlp")
    assert entry["shapes"] == MLP_FOLD_SHAPES and entry["calls"] == 1
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": entry["shapes"]})
    with torch.no_grad():
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_mlp": (entry["calls"], 0)}


def test_the_mlp_kernel_gets_the_raw_residual_stream_and_the_norm_weight(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": MLP_FOLD_SHAPES},
                             sources=reference_sources("rmsnorm_mlp"))
    residuals = []
    model.layers[0].mlp_norm.register_forward_pre_hook(lambda module, args: residuals.append(args[0]))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=plugin.ALL)
        model(*inputs)                    # the watched pass finds the fold,
        model(*inputs)                    # the next call decides and checks it
        recorded_calls(model, "rmsnorm_mlp").clear()
        assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
    (x, norm_weight, w_gate, w_up, w_down, eps, act), = recorded_calls(model, "rmsnorm_mlp")
    assert torch.equal(x, residuals[-1].reshape(SEQ, 64)) and not torch.allclose(x.pow(2).mean(-1), torch.ones(SEQ))
    mlp, norm = model.layers[0].mlp, model.layers[0].mlp_norm
    assert norm_weight is norm.weight or torch.equal(norm_weight, norm.weight)
    assert torch.equal(w_gate, mlp.gate_proj.weight) and torch.equal(w_down, mlp.down_proj.weight)
    assert (eps, act) == (norm.eps, "silu")


def test_a_norm_feeding_an_mlp_folds_into_the_mlp_before_its_linears(tmp_path):
    # Every kernel that could take the MLP or its linears is loaded, with matmul routing the linears.
    model, inputs = tiny_llama()
    kernels = {"rmsnorm_mlp": MLP_FOLD_SHAPES, "rmsnorm_linear": FOLD_SHAPES,
               "fused_mlp": LLAMA_SHAPES["fused_mlp"], "matmul": LLAMA_SHAPES["matmul"]}
    folder = write_optimized(tmp_path / "opt", kernels, sources=reference_sources(*kernels))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=plugin.ALL)
        assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
        stats = one_forward_stats(model, inputs)
    assert _folds(model) == {
        "layers.0.attention_norm": (["layers.0.attention.q_proj", "layers.0.attention.k_proj",
                                     "layers.0.attention.v_proj"], None),
        "layers.0.mlp_norm": (["layers.0.mlp"], None),
        "norm": (["lm_head"], None)}
    # q, k, v and the lm_head fused with their norms; the MLP whole; o_proj alone is a matmul.
    assert stats == {"rmsnorm_mlp": (1, 0), "rmsnorm_linear": (4, 0), "fused_mlp": (0, 0), "matmul": (1, 0)}


class GeluMLP(nn.Module):
    """A gated MLP whose activation (tanh GELU) is written in its forward: the router guesses silu."""

    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = (nn.Linear(16, 24, bias=False), nn.Linear(16, 24, bias=False),
                                                        nn.Linear(24, 16, bias=False))

    def forward(self, x):
        return self.down_proj(nn.functional.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class NormMLP(nn.Module):
    def __init__(self, mlp=None, residual=False):
        super().__init__()
        self.norm, self.mlp, self.residual = RMSNorm(16), mlp or GeluMLP(), residual

    def forward(self, x):
        h = self.norm(x)
        return self.mlp(h) + (h if self.residual else 0)


def _mlp_folder(tmp_path, act="silu"):
    return write_optimized(tmp_path / "opt", {"rmsnorm_mlp": [{"M": 4, "D": 16, "F": 24, "act": act}]},
                           sources=reference_sources("rmsnorm_mlp"))


def test_an_mlp_norm_whose_output_also_feeds_the_residual_is_not_folded(tmp_path):
    torch.manual_seed(0)
    model, x = NormMLP(residual=True), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _mlp_folder(tmp_path, act="gelu"), policy=plugin.ALL)
        recorded_calls(model, "rmsnorm_mlp").clear()
        assert torch.equal(model(x), expected)
    assert _folds(model) == {} and recorded_calls(model, "rmsnorm_mlp") == []
    assert "outside a consumer" in plugin.router_of(model).folding.searched["norm"]


def test_a_wrongly_guessed_activation_is_caught_by_the_pair_check(tmp_path):
    torch.manual_seed(0)
    model, x = NormMLP(), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _mlp_folder(tmp_path, act="silu"), policy=plugin.ALL)
        assert torch.equal(model(x), expected)
        assert torch.equal(model(x), expected)
    consumers, rejected = _folds(model)["norm"]
    assert consumers == ["mlp"] and "the folded result differs from the norm and mlp" in rejected


def test_an_mlp_holding_its_activation_folds_with_it(tmp_path):
    torch.manual_seed(0)
    mlp = GeluMLP()
    mlp.act_fn = nn.GELU(approximate="tanh")
    mlp.forward = lambda x: mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
    model, x = NormMLP(mlp), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _mlp_folder(tmp_path, act="gelu"), policy=plugin.ALL)
        assert plugin.output_error(expected, model(x)) <= plugin.tolerance(expected)
        assert one_forward_stats(model, (x,)) == {"rmsnorm_mlp": (1, 0)}
    assert _folds(model) == {"norm": (["mlp"], None)}


def test_an_mlp_folded_llama_compiles_into_one_graph_with_the_fused_op(tmp_path):
    graph_ops, model = _compiled_llama_graph_ops(tmp_path, {"rmsnorm_mlp": MLP_FOLD_SHAPES})
    assert len([op for op in graph_ops if op.startswith("autokernel.rmsnorm_mlp")]) == 1
    # Of the three norms, the MLP's is gone from the graph; its MLP's silu too.
    assert len([op for op in graph_ops if "rsqrt" in op]) == 2
    assert not any("silu" in op for op in graph_ops)
    assert all(route.handed is None for route in plugin.router_of(model).folding.routes.values())


def test_verify_gets_an_rmsnorm_mlp_site_to_time_against_the_norm_and_mlp(tmp_path):
    # The route table (autokernel/route_table.py) times each site's run_ours against run_pytorch:
    # for the fold, the fused kernel on a copy of the raw input against norm + MLP run by PyTorch.
    from autokernel import route_table

    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": MLP_FOLD_SHAPES})
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=plugin.ALL, keep_examples=True)
        model(*inputs)
        model(*inputs)
        router = plugin.router_of(model)
        (site,) = [s for s in router.sites.values() if s.kernel.kernel_type == "rmsnorm_mlp"]
        assert site.shape == MLP_FOLD_SHAPES[0]
        ours, theirs = site.run_ours(), site.run_pytorch()
        assert plugin.output_error(theirs, ours) <= plugin.tolerance(theirs)
    records = route_table.measure(router, on_gpu=False)
    (record,) = records["1_rmsnorm_mlp"]
    assert record.why == route_table.NOT_TIMED_ON_CPU and not (record.route_eager or record.route_compiled)


def test_a_hugging_face_llamas_mlp_norm_folds_into_its_mlp(tmp_path):
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    from autokernel.models import load_model

    loaded = load_model(hf="llama", device="cpu", input_shape=(1, 8), hf_overrides=dict(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4))
    model, inputs = loaded.model, loaded.inputs
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": [{"M": 8, "D": 64, "F": 128, "act": "silu"}]})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=plugin.ALL)
        for _ in range(2):
            assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
    # LlamaMLP holds its activation as act_fn (HF's SiLUActivation): read as silu, checked, folded.
    assert _folds(model)["model.layers.0.post_attention_layernorm"] == (["model.layers.0.mlp"], None)
    assert kernel_stats(model)["rmsnorm_mlp"]["hits"] == 1
