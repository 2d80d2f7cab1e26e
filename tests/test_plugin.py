"""Tests for autokernel/routing/plugin.py: plugging kernels into a model, by policy, with fallbacks, under
torch.compile."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.core import patching
from autokernel.core.paths import MANIFEST_NAME, ROOT  # noqa: E402
from autokernel.profile.models import load_model  # noqa: E402
from autokernel.routing import manifest, plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.routing.manifest import RouteRecord  # noqa: E402
from autokernel.routing.outputs import output_error, tolerance  # noqa: E402
from tests.plugin_helpers import (guard_lines, kernel_stats, one_forward_stats, recording_backend,  # noqa: E402
                                  write_optimized)

SEQ = 8
LLAMA_KWARGS = {"config": "tiny", "n_layers": 1, "vocab_size": 128}
# The tiny LLaMA's real shapes at batch 1, sequence 8, as the profiler reports them.
LLAMA_SHAPES = {
    "rmsnorm": [{"M": SEQ, "N": 64}],
    "matmul": [{"M": SEQ, "N": 64, "K": 64}, {"M": SEQ, "N": 128, "K": 64}],
    "flash_attention": [{"B": 1, "H": 4, "S": SEQ, "D": 16, "causal": 1}],
    "fused_mlp": [{"M": SEQ, "D": 64, "F": 176, "act": "silu"}],
    "rotary_embedding": [{"B": 1, "H": 4, "S": SEQ, "D": 16}],
}
# A stand-in "optimized" kernel, where a test needs speed or must see what the kernel receives:
# the reference itself, recording the arguments it was called with.
REFERENCE_KERNEL = '''"""{kernel_type} stand-in for the plugin tests: the reference, recording its calls."""
import reference

KERNEL_TYPE = "{kernel_type}"
CALLS = []


def kernel_fn(*args):
    CALLS.append(args)
    return {body}
'''


def reference_kernel(kernel_type: str, body: str | None = None) -> str:
    return REFERENCE_KERNEL.format(kernel_type=kernel_type, body=body or f"reference.{kernel_type}(*args)")


def reference_sources(*kernel_types: str) -> dict:
    return {kernel_type: reference_kernel(kernel_type) for kernel_type in kernel_types}


def tiny_llama():
    loaded = load_model(ROOT / "models" / "llama.py", input_shape=(1, SEQ), model_kwargs=LLAMA_KWARGS, device="cpu")
    return loaded.model, loaded.inputs


def recorded_calls(model, kernel_type: str) -> list:
    """The calls a stand-in kernel recorded (one list per kernel source: tests clear it after plugging in)."""
    kernel = next(k for k in plugin.router_of(model).kernels if k.kernel_type == kernel_type)
    return kernel.kernel_fn.__globals__["CALLS"]


# --------------------------------------------------------------------------- the LLaMA end to end
def test_llama_with_starter_kernels_matches_the_original(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES, sources=reference_sources("rotary_embedding"))
    with torch.no_grad():
        expected = model(*inputs)
        assert plugin.plug_in(model, folder, policy=ALL) is model
        recorded_calls(model, "rotary_embedding").clear()
        actual = model(*inputs)
    assert output_error(expected, actual) <= tolerance(expected)
    # Per layer: q, k, v and o projections and the lm_head (the MLP's linears are inside the fused MLP);
    # 2 norms per layer and the final norm; q and k rotated.
    assert one_forward_stats(model, inputs) == {"rmsnorm": (3, 0), "matmul": (5, 0), "flash_attention": (1, 0),
                                                "fused_mlp": (1, 0), "rotary_embedding": (2, 0)}
    routed = {r["path"]: r["routed_as"] for r in plugin.router_of(model).summary()["module_routes"]
              if r["routed_as"] and r["routed_as"] != "matmul"}
    assert routed == {"layers.0.attention_norm": "rmsnorm", "layers.0.mlp_norm": "rmsnorm", "norm": "rmsnorm",
                      "layers.0.mlp": "fused_mlp act=silu", "layers.0.attention.rotary": "rotary_embedding"}
    rotary_x, cos, sin = recorded_calls(model, "rotary_embedding")[0]
    assert rotary_x.shape == (1, 4, SEQ, 16) and rotary_x.is_contiguous() and cos.shape == sin.shape == (SEQ, 8)

    plugin.unplug(model)
    assert plugin.router_of(model) is None
    assert not any(patching.runs_of(module) or type(module) is not patching.original_class(type(module))
                   for module in model.modules())
    with torch.no_grad():
        assert torch.equal(model(*inputs), expected)


def test_unverified_shapes_and_dtypes_fall_back_and_are_counted(tmp_path):
    model, inputs = tiny_llama()
    shapes = {"matmul": [{"M": SEQ, "N": 64, "K": 64}], "rmsnorm": LLAMA_SHAPES["rmsnorm"]}
    folder = write_optimized(tmp_path / "fp32", shapes, sources=reference_sources("matmul", "rmsnorm"))
    fp16_norm = write_optimized(tmp_path / "fp16", {"rmsnorm": shapes["rmsnorm"]}, dtypes=("float16",),
                                sources=reference_sources("rmsnorm"))
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        assert output_error(expected, model(*inputs)) <= tolerance(expected)
        # Only the attention projections were verified: the MLP's linears and the lm_head run in PyTorch.
        assert one_forward_stats(model, inputs)["matmul"] == (4, 4)
        assert kernel_stats(model)["matmul"]["fallback_reasons"] == {"shape M=8,N=176,K=64 not verified": 2,
                                                                     "shape M=8,N=64,K=176 not verified": 1,
                                                                     "shape M=8,N=128,K=64 not verified": 1}
        plugin.router_of(model).reset_stats()
        model(inputs[0][:, :5])     # another sequence length: nothing verified
        stats = kernel_stats(model)
        assert stats["matmul"]["hits"] == stats["rmsnorm"]["hits"] == 0
        assert stats["matmul"]["fallbacks"] == 8 and stats["rmsnorm"]["fallbacks"] == 3

        plugin.plug_in(model, fp16_norm, policy=ALL)   # replaces the earlier kernels
        recorded_calls(model, "rmsnorm").clear()
        assert output_error(expected, model(*inputs)) == 0.0
        norm = kernel_stats(model)["rmsnorm"]
        assert (norm["hits"], norm["fallback_reasons"]) == (0, {"dtype float32 not verified": 3})
        assert recorded_calls(model, "rmsnorm") == []


# --------------------------------------------------------------------------- policies and the route table
def llama_route_records(win_eager: bool, win_compiled: bool) -> list[RouteRecord]:
    return [RouteRecord(shape=LLAMA_SHAPES["rmsnorm"][0], dtype="float32", site="module norm (RMSNorm)", calls=3,
                        ours_us=1.0, pytorch_us=2.0 if win_eager else 0.5, ours_gpu_us=1.0,
                        compiled_gpu_us=2.0 if win_compiled else 0.5, route_eager=win_eager,
                        route_compiled=win_compiled, why="measured")]


def test_the_measured_policy_routes_only_where_the_table_says_ours_wins(tmp_path):
    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", {"rmsnorm": LLAMA_SHAPES["rmsnorm"]},
                             sources=reference_sources("rmsnorm"))
    plugin.plug_in(model, folder)            # no table yet: nothing was measured, so nothing routes
    assert one_forward_stats(model, inputs)["rmsnorm"] == (0, 3)
    assert kernel_stats(model)["rmsnorm"]["fallback_reasons"] == {
        "not measured at this shape on this GPU (autokernel verify measures it)": 3}

    kernel = plugin.load_kernels(folder)[0]
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: (kernel.source_sha256, plugin.device_name(),
                                                                       llama_route_records(True, False))})
    plugin.plug_in(model, folder)
    assert one_forward_stats(model, inputs)["rmsnorm"] == (3, 0)
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: (kernel.source_sha256, plugin.device_name(),
                                                                       llama_route_records(False, True))})
    plugin.plug_in(model, folder)
    assert one_forward_stats(model, inputs)["rmsnorm"] == (0, 3)
    assert kernel_stats(model)["rmsnorm"]["fallback_reasons"] == {"measured": 3}


def test_a_table_measured_on_another_gpu_or_for_another_source_is_not_followed(tmp_path):
    folder = write_optimized(tmp_path / "opt", {"rmsnorm": LLAMA_SHAPES["rmsnorm"]},
                             sources=reference_sources("rmsnorm"))
    kernel = plugin.load_kernels(folder)[0]
    records = llama_route_records(True, True)
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: (kernel.source_sha256, "NVIDIA B200", records)})
    assert plugin.load_kernels(folder)[0].records == {}
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: ("0" * 64, plugin.device_name(), records)})
    assert plugin.load_kernels(folder)[0].records == {}
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: (kernel.source_sha256, plugin.device_name(),
                                                                       records)})
    (loaded,) = plugin.load_kernels(folder)
    assert loaded.record(LLAMA_SHAPES["rmsnorm"][0], torch.float32) == records[0]


def test_an_unknown_policy_is_refused(tmp_path):
    folder = write_optimized(tmp_path / "opt", {"rmsnorm": LLAMA_SHAPES["rmsnorm"]})
    with pytest.raises(ValueError, match="unknown routing policy 'fastest'"):
        plugin.plug_in(nn.Linear(2, 2), folder, policy="fastest")


# --------------------------------------------------------------------------- the router's rules
def test_calls_that_need_gradients_fall_back(tmp_path):
    torch.manual_seed(0)
    model, x = nn.Linear(16, 24), torch.randn(10, 16)
    folder = write_optimized(tmp_path / "opt", {"matmul": [{"M": 10, "N": 24, "K": 16}]},
                             sources=reference_sources("matmul"))
    plugin.plug_in(model, folder, policy=ALL)
    model(x).sum().backward()
    matmul = kernel_stats(model)["matmul"]
    assert matmul["hits"] == 0
    assert matmul["fallback_reasons"] == {"inputs need gradients (the kernels are inference only)": 1}
    assert model.weight.grad is not None
    with torch.no_grad():
        model(x)
    assert kernel_stats(model)["matmul"]["hits"] == 1


class OffsetRMSNorm(nn.Module):
    """Gemma's RMSNorm: scales by (1 + weight), which a plain rmsnorm kernel does not compute."""

    def __init__(self, dim: int):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


def test_module_route_is_dropped_when_its_first_call_differs(tmp_path):
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), OffsetRMSNorm(8)).eval(), torch.randn(3, 8)
    folder = write_optimized(tmp_path / "opt", {"rmsnorm": [{"M": 3, "N": 8}]}, sources=reference_sources("rmsnorm"))
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, folder, policy=ALL)
        recorded_calls(model, "rmsnorm").clear()
        assert torch.equal(model(x), expected)
        assert torch.equal(model(x), expected)
    route = plugin.router_of(model).summary()["module_routes"][0]
    assert route["path"] == "1" and route["routed_as"] is None and route["candidates"] == []
    assert route["rejections"][0].startswith("rmsnorm: differs from the module's own forward by")
    assert len(recorded_calls(model, "rmsnorm")) == 1          # checked once, never again
    assert kernel_stats(model)["rmsnorm"]["hits"] == 0


# --------------------------------------------------------------------------- torch.compile
@pytest.mark.slow
def test_a_routed_llama_compiles_into_one_graph_with_the_kernels_ops_in_it(tmp_path):
    # The recording backend traces through the ops' fake implementations; fullgraph=True fails on any graph break.
    from torch._dynamo.utils import counters

    model, inputs = tiny_llama()
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES)
    recording, graph_ops = recording_backend()

    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        model(*inputs)                    # the eager call resolves the routes and checks the module routes
        compiled = torch.compile(model, backend=recording, fullgraph=True)
        assert output_error(expected, compiled(*inputs)) <= tolerance(expected)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    ours = sorted({op.split(".")[1].split("_", 1)[0] for op in graph_ops if op.startswith("autokernel.")})
    assert ours == ["flash", "fused", "matmul", "rmsnorm", "rotary"]
    # Inside the graph the kernels are the ops' fake implementations: no eager call was counted.
    assert all(kernel.op_kind.startswith("custom_op") for kernel in plugin.router_of(model).kernels)
    torch._dynamo.reset()


def test_compiled_decisions_are_separate_from_eager_ones(tmp_path):
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8)).eval(), torch.randn(3, 8)
    folder = write_optimized(tmp_path / "opt", {"matmul": [{"M": 3, "N": 8, "K": 8}]},
                             sources=reference_sources("matmul"))
    kernel = plugin.load_kernels(folder)[0]
    record = RouteRecord(shape={"M": 3, "N": 8, "K": 8}, dtype="float32", site="module 0 (Linear)", calls=1,
                         route_eager=False, route_compiled=True, why="slower eagerly, faster compiled")
    manifest.write_route_tables(folder / MANIFEST_NAME, {kernel.name: (kernel.source_sha256, plugin.device_name(),
                                                                       [record])})
    recording, graph_ops = recording_backend()
    torch._dynamo.reset()
    with torch.no_grad():
        plugin.plug_in(model, folder)
        model(x)
        assert kernel_stats(model)["matmul"]["hits"] == 0
        torch.compile(model, backend=recording, fullgraph=True)(x)
    assert any(op.startswith("autokernel.matmul") for op in graph_ops)
    torch._dynamo.reset()


def test_a_plugged_in_model_that_routes_nothing_compiled_checks_few_more_guards_than_the_model_itself(tmp_path):
    # Dynamo checks its guards before every compiled call: under CUDA graphs they are much of a small model's time.
    # Every run it traced cost ~25 guard lines (the run's record, the router's attributes, the decision looked up):
    # this LLaMA with nothing routed compiled, 691 lines against 315 as it is (torch 2.13). A run that changes nothing
    # in a compiled forward is not traced (autokernel/routing/router.py): 408, 2 a module route and the model's own
    # patched forward (its arguments, its class).
    model, inputs = tiny_llama()
    plain = guard_lines(model, inputs)
    with torch.no_grad():
        plugin.plug_in(model, write_optimized(tmp_path / "opt", LLAMA_SHAPES))    # nothing measured on this CPU
        model(*inputs)
    routes = len(plugin.router_of(model).module_routes)
    assert routes >= 6
    assert guard_lines(model, inputs) <= plain + 60 + 4 * routes


def test_a_compiled_forward_follows_a_later_decision_to_route_compiled(tmp_path):
    # The runs traced are chosen before the compile from the decisions then; a decision made later changes them, and
    # Dynamo, guarding on them, compiles the forward again with the route in it.
    model, x = nn.Sequential(nn.Linear(8, 8)).eval(), torch.randn(3, 8)
    folder = write_optimized(tmp_path / "opt", {"matmul": [{"M": 3, "N": 8, "K": 8}]},
                             sources=reference_sources("matmul"))
    recording, graph_ops = recording_backend()
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            plugin.plug_in(model, folder)          # "measured", nothing measured: not routed
            model(x)
            compiled = torch.compile(model, backend=recording)
            compiled(x)
            assert graph_ops and not any(op.startswith("autokernel.") for op in graph_ops)
            plugin.router_of(model).set_policy(ALL)
            model(x)                               # the eager call decides again: routed, compiled too
            compiled(x)
        assert any(op.startswith("autokernel.matmul") for op in graph_ops)
    finally:
        torch._dynamo.reset()
