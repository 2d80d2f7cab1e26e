"""autokernel/kernel_types/rmsnorm_mlp.py: the adversarial inputs have the property each is named for; the profiler
counts an RMSNorm whose output only a gated MLP reads with it; the router folds the pair, checked first."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import reference  # noqa: E402
from autokernel.core.hardware import detect  # noqa: E402
from autokernel.kernel_types import mlps, registry, rmsnorm_mlp  # noqa: E402
from autokernel.profile import profiler  # noqa: E402
from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.routing.outputs import output_error, tolerance  # noqa: E402
from tests.test_classify import DIM, HIDDEN, ROWS, PlainNorm, _sites, one_thread  # noqa: E402,F401 (a fixture)
from tests.test_fold_routing import (FOLD_SHAPES, RMSNorm, _compiled_llama_graph_ops, _folds,  # noqa: E402
                                     _plugged_stats)
from tests.test_plugin import (LLAMA_SHAPES, SEQ, kernel_stats, one_forward_stats, recorded_calls,  # noqa: E402
                               reference_sources, tiny_llama, write_optimized)


SHAPE = {"M": 16, "D": 256, "F": 128, "act": "silu"}


def _inputs(make, dtype=torch.float16, shape=SHAPE):
    return make(shape, dtype, torch.Generator().manual_seed(0), "cpu")


def test_huge_rows_overflow_half_precision_statistics_and_products():
    inputs = _inputs(rmsnorm_mlp.rmsnorm_mlp_huge_rows)
    x, weight = inputs["x"], inputs["norm_weight"]
    assert torch.isfinite(x).all()
    assert (x.float().square().sum(dim=1) > torch.finfo(torch.float16).max).all()
    assert torch.isinf(x.square().sum(dim=1, dtype=torch.float16)).all()
    # x * norm_weight rounded to float16 (for the tensor cores) overflows too, in most rows.
    assert torch.isinf(x * weight).any(dim=1).float().mean() > 0.5


def test_zero_and_tiny_rows_put_eps_in_charge():
    inputs = _inputs(rmsnorm_mlp.rmsnorm_mlp_zero_and_tiny_rows, dtype=torch.float32)
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
    inputs = _inputs(rmsnorm_mlp.rmsnorm_mlp_large_norm_weight, dtype=torch.float32, shape={**SHAPE, "F": 512})
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
    assert rmsnorm_mlp.rmsnorm_mlp_bytes(shape, 2) == mlp.bytes_moved(shape, 2) + 2 * 2048
    assert rmsnorm_mlp.rmsnorm_mlp_flops(shape) == mlp.flops(shape) + 4 * 512 * 2048


# --------------------------------------------------------------------------- the profiler
def test_llama_mlp_norms_count_with_their_mlps_as_rmsnorm_mlp(one_thread):
    from models import llama

    torch.manual_seed(0)
    model = llama.get_model("tiny", n_layers=2).eval()
    report = profiler.profile_model(model, llama.get_inputs("tiny", seq=16), warmup=1, iters=2)
    folded = _sites(report, "rmsnorm_mlp")
    assert set(folded) == {"layers.0.mlp", "layers.1.mlp"}
    for site in folded.values():
        assert site.shape == {"M": 16, "D": 64, "F": 176, "act": "silu"} and site.calls == 1
        # The norm's statistics and the MLP's products and activation, in one site.
        assert {"aten::rsqrt", "aten::linear", "aten::silu"} <= set(site.ops)
    # Amdahl sees the norm's time and the MLP's together, under the fused type.
    norm_and_mlp_ms = sum(row.time_ms for row in report.ops if row.kernel_type == "rmsnorm_mlp")
    plan = profiler.build_plan(report, detect())
    entry = next(e for e in plan.entries if e.kernel_type == "rmsnorm_mlp")
    assert entry.time_ms == pytest.approx(norm_and_mlp_ms) and entry.time_ms > 0
    assert entry.calls == 2 and entry.shapes == [{"M": 16, "D": 64, "F": 176, "act": "silu"}]
    assert not any(e.kernel_type in ("fused_mlp", "rmsnorm") for e in plan.entries)
    assert "rmsnorm_mlp" in plan.extra["fold_policy"]


class NamedRMSNorm(PlainNorm):
    """Named so: a norm the router could fold."""
    eps = 1e-6


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)), the activation written in the forward."""

    def __init__(self, act=F.silu):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(DIM, HIDDEN, bias=False), nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj, self.act = nn.Linear(HIDDEN, DIM, bias=False), act

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class PlannedNormMLP(nn.Module):
    def __init__(self, act=F.silu, residual=False):
        super().__init__()
        self.norm, self.mlp, self.residual = NamedRMSNorm(DIM), GatedMLP(act), residual

    def forward(self, x):
        h = self.norm(x)
        return self.mlp(h) + (h if self.residual else 0)


def _norm_mlp_sites(model):
    torch.manual_seed(0)
    report = profiler.profile_model(model.eval(), (torch.randn(ROWS, DIM),), warmup=1, iters=2)
    return {(site.kernel_type, site.module_path): site.shape for site in report.call_sites}


def test_a_norm_feeding_only_its_mlp_is_planned_as_rmsnorm_mlp(one_thread):
    assert _norm_mlp_sites(PlannedNormMLP()) == {("rmsnorm_mlp", "mlp"): {"M": ROWS, "D": DIM, "F": HIDDEN, "act": "silu"}}


def test_a_norm_whose_output_also_feeds_the_residual_stays_rmsnorm_and_fused_mlp(one_thread):
    assert _norm_mlp_sites(PlannedNormMLP(residual=True)) == {
        ("rmsnorm", "norm"): {"M": ROWS, "N": DIM}, ("fused_mlp", "mlp"): {"M": ROWS, "D": DIM, "F": HIDDEN, "act": "silu"}}


def test_an_mlp_whose_activation_the_router_would_not_read_stays_fused_mlp(one_thread):
    # tanh GELU written in the forward: the router, seeing no activation module, reads silu; planning
    # rmsnorm_mlp at act=gelu would make a job verify can never route.
    sites = _norm_mlp_sites(PlannedNormMLP(act=lambda t: F.gelu(t, approximate="tanh")))
    assert sites == {("rmsnorm", "norm"): {"M": ROWS, "N": DIM},
                     ("fused_mlp", "mlp"): {"M": ROWS, "D": DIM, "F": HIDDEN, "act": "gelu"}}


# --------------------------------------------------------------------------- the router: a norm folded into the whole MLP
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
    assert mlps.is_gated_mlp_module(mlp) and not mlps.is_gated_mlp_module(model.layers[0].attention)
    torch.manual_seed(2)
    x = torch.randn(1, SEQ, 64)
    reading = rmsnorm_mlp.read_rmsnorm_mlp(norm, mlp, x)
    assert reading.shape == {"M": SEQ, "D": 64, "F": 176, "act": "silu"}
    # The reference on the kernel's arguments is the norm, then the MLP.
    with torch.no_grad():
        torch.testing.assert_close(reading.launch(registry.get("rmsnorm_mlp").reference, x), mlp(norm(x)))
    assert rmsnorm_mlp.read_rmsnorm_mlp(norm, mlp, torch.randn(SEQ, 32)) == "input size differs from the norm's or the MLP's"


def test_the_profiler_plans_rmsnorm_mlp_where_the_router_folds_it(tmp_path):
    # The tiny LLaMA of models/llama.py: the plan's rmsnorm_mlp shapes, verified by the starter,
    # are exactly the calls the router runs folded, and the model's output holds.
    model, inputs = tiny_llama()
    with torch.no_grad():
        report = profiler.profile_model(model, inputs, warmup=1, iters=1)
    entry = next(e for e in profiler.build_plan(report, detect()).entries
                 if e.kernel_type == "rmsnorm_mlp")
    assert entry.shapes == MLP_FOLD_SHAPES and entry.calls == 1
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": entry.shapes})
    with torch.no_grad():
        assert _plugged_stats(model, inputs, folder) == {"rmsnorm_mlp": (entry.calls, 0)}


def test_the_mlp_kernel_gets_the_raw_residual_stream_and_the_norm_weight(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": MLP_FOLD_SHAPES},
                             sources=reference_sources("rmsnorm_mlp"))
    residuals = []
    model.layers[0].mlp_norm.register_forward_pre_hook(lambda module, args: residuals.append(args[0]))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        model(*inputs)                    # the watched pass finds the fold,
        model(*inputs)                    # the next call decides and checks it
        recorded_calls(model, "rmsnorm_mlp").clear()
        assert output_error(expected, model(*inputs)) <= tolerance(expected)
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
        plugin.plug_in(model, folder, policy=ALL)
        assert output_error(expected, model(*inputs)) <= tolerance(expected)
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
        plugin.plug_in(model, _mlp_folder(tmp_path, act="gelu"), policy=ALL)
        recorded_calls(model, "rmsnorm_mlp").clear()
        assert torch.equal(model(x), expected)
    assert _folds(model) == {} and recorded_calls(model, "rmsnorm_mlp") == []
    assert "outside a consumer" in plugin.router_of(model).folding.searched["norm"]


def test_a_wrongly_guessed_activation_is_caught_by_the_pair_check(tmp_path):
    torch.manual_seed(0)
    model, x = NormMLP(), torch.randn(4, 16)
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, _mlp_folder(tmp_path, act="silu"), policy=ALL)
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
        plugin.plug_in(model, _mlp_folder(tmp_path, act="gelu"), policy=ALL)
        assert output_error(expected, model(x)) <= tolerance(expected)
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
    # The route table (autokernel/verify/route_table.py) times each site's run_ours against run_pytorch:
    # for the fold, the fused kernel on a copy of the raw input against norm + MLP run by PyTorch.
    from autokernel.verify import route_table

    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": MLP_FOLD_SHAPES})
    with torch.no_grad():
        plugin.plug_in(model, folder, policy=ALL, keep_examples=True)
        model(*inputs)
        model(*inputs)
        router = plugin.router_of(model)
        (site,) = [s for s in router.sites.values() if s.kernel.kernel_type == "rmsnorm_mlp"]
        assert site.shape == MLP_FOLD_SHAPES[0]
        ours, theirs = site.run_ours(), site.run_pytorch()
        assert output_error(theirs, ours) <= tolerance(theirs)
    records = route_table.measure(router, on_gpu=False)
    (record,) = records["1_rmsnorm_mlp"]
    assert record.why == route_table.NOT_TIMED_ON_CPU and not (record.route_eager or record.route_compiled)


def test_a_hugging_face_llamas_mlp_norm_folds_into_its_mlp(tmp_path):
    pytest.importorskip("transformers", reason="transformers is the optional [hf] extra")
    from autokernel.profile.models import load_model

    loaded = load_model(hf="llama", device="cpu", input_shape=(1, 8), hf_overrides=dict(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4))
    model, inputs = loaded.model, loaded.inputs
    folder = write_optimized(tmp_path / "opt", {"rmsnorm_mlp": [{"M": 8, "D": 64, "F": 128, "act": "silu"}]})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        for _ in range(2):
            assert output_error(expected, model(*inputs)) <= tolerance(expected)
    # LlamaMLP holds its activation as act_fn (HF's SiLUActivation): read as silu, checked, folded.
    assert _folds(model)["model.layers.0.post_attention_layernorm"] == (["model.layers.0.mlp"], None)
    assert kernel_stats(model)["rmsnorm_mlp"]["hits"] == 1
