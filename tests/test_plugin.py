"""Tests for autokernel/plugin.py: routing a model's calls to optimized kernels, fallback, torch.compile, errors."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel import plugin  # noqa: E402
from autokernel.models import load_model  # noqa: E402
from autokernel.paths import MANIFEST_NAME, ROOT, starter_path  # noqa: E402

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


def write_optimized(folder: Path, kernels: dict, dtypes=("float32",), sources: dict | None = None) -> Path:
    """An optimized_kernels folder: kernel type -> verified shapes; the starter, or a source from `sources`."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = {}
    for rank, (kernel_type, shapes) in enumerate(kernels.items(), start=1):
        name = f"{rank}_{kernel_type}"
        source = (sources or {}).get(kernel_type)
        if source is None:
            shutil.copyfile(starter_path(kernel_type), folder / f"{name}.py")
        else:
            (folder / f"{name}.py").write_text(source)
        entries[name] = {"file": f"{name}.py", "kernel_type": kernel_type, "rank": rank, "shapes": shapes,
                         "dtypes": list(dtypes), "best_speedup_vs_pytorch": 1.0}
    plugin.write_manifest(folder / MANIFEST_NAME, entries)
    return folder


def reference_kernel(kernel_type: str, body: str | None = None) -> str:
    return REFERENCE_KERNEL.format(kernel_type=kernel_type, body=body or f"reference.{kernel_type}(*args)")


def reference_sources(*kernel_types: str) -> dict:
    return {kernel_type: reference_kernel(kernel_type) for kernel_type in kernel_types}


def tiny_llama():
    loaded = load_model(ROOT / "models" / "llama.py", input_shape=(1, SEQ), model_kwargs=LLAMA_KWARGS, device="cpu")
    return loaded.model, loaded.inputs


def kernel_stats(model) -> dict:
    return {k["kernel_type"]: k for k in plugin.router_of(model).summary()["kernels"]}


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
        assert plugin.plug_in(model, folder) is model
        recorded_calls(model, "rotary_embedding").clear()
        actual = model(*inputs)
    assert plugin.output_error(expected, actual) <= plugin.tolerance(expected)
    stats = kernel_stats(model)
    # Per layer: q, k, v, o linears and the lm_head; 2 norms per layer and the final norm; q and k rotated.
    assert {t: (s["hits"], s["fallbacks"]) for t, s in stats.items()} == {
        "rmsnorm": (3, 0), "matmul": (5, 0), "flash_attention": (1, 0), "fused_mlp": (1, 0),
        "rotary_embedding": (2, 0)}
    routed = {r["path"]: r["routed_as"] for r in plugin.router_of(model).summary()["module_routes"]}
    assert routed == {"layers.0.attention_norm": "rmsnorm", "layers.0.mlp_norm": "rmsnorm", "norm": "rmsnorm",
                      "layers.0.mlp": "fused_mlp act=silu", "layers.0.attention.rotary": "rotary_embedding"}
    rotary_x, cos, sin = recorded_calls(model, "rotary_embedding")[0]
    assert rotary_x.shape == (1, 4, SEQ, 16) and rotary_x.is_contiguous() and cos.shape == sin.shape == (SEQ, 8)

    plugin.unplug(model)
    assert plugin.router_of(model) is None
    assert not any("forward" in vars(module) for module in model.modules())
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
        plugin.plug_in(model, folder)
        assert plugin.output_error(expected, model(*inputs)) <= plugin.tolerance(expected)
        matmul = kernel_stats(model)["matmul"]
        # Only the attention projections were verified: the MLP's linears and the lm_head run in PyTorch.
        assert (matmul["hits"], matmul["fallbacks"]) == (4, 4)
        assert matmul["fallback_reasons"] == {"shape M=8,N=176,K=64 not verified": 2,
                                              "shape M=8,N=64,K=176 not verified": 1,
                                              "shape M=8,N=128,K=64 not verified": 1}

        plugin.router_of(model).reset_stats()
        model(inputs[0][:, :5])     # another sequence length: nothing verified
        stats = kernel_stats(model)
        assert stats["matmul"]["hits"] == stats["rmsnorm"]["hits"] == 0
        assert stats["matmul"]["fallbacks"] == 8 and stats["rmsnorm"]["fallbacks"] == 3

        plugin.plug_in(model, fp16_norm)   # replaces the earlier kernels
        recorded_calls(model, "rmsnorm").clear()
        assert plugin.output_error(expected, model(*inputs)) == 0.0
        norm = kernel_stats(model)["rmsnorm"]
        assert (norm["hits"], norm["fallback_reasons"]) == (0, {"dtype float32 not verified": 3})
        assert recorded_calls(model, "rmsnorm") == []


# --------------------------------------------------------------------------- the router's rules
def test_calls_that_need_gradients_fall_back(tmp_path):
    torch.manual_seed(0)
    model, x = nn.Linear(16, 24), torch.randn(10, 16)
    folder = write_optimized(tmp_path / "opt", {"matmul": [{"M": 10, "N": 24, "K": 16}]},
                             sources=reference_sources("matmul"))
    plugin.plug_in(model, folder)
    model(x).sum().backward()
    matmul = kernel_stats(model)["matmul"]
    assert matmul["hits"] == 0
    assert matmul["fallback_reasons"] == {"inputs need gradients (the kernels are inference only)": 1}
    assert model.weight.grad is not None
    with torch.no_grad():
        model(x)
    assert kernel_stats(model)["matmul"]["hits"] == 1


# --------------------------------------------------------------------------- module routes
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
        plugin.plug_in(model, folder)
        recorded_calls(model, "rmsnorm").clear()
        assert torch.equal(model(x), expected)
        assert torch.equal(model(x), expected)
    route = plugin.router_of(model).summary()["module_routes"][0]
    assert route["path"] == "1" and route["routed_as"] is None and route["candidates"] == []
    assert route["rejections"][0].startswith("rmsnorm: differs from the module's own forward by")
    assert len(recorded_calls(model, "rmsnorm")) == 1          # checked once, never again
    assert kernel_stats(model)["rmsnorm"]["hits"] == 0


# --------------------------------------------------------------------------- torch.compile
class NormedSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 64, bias=False)
        self.norm = nn.RMSNorm(64, eps=1e-6)

    def forward(self, x):
        return torch.softmax(self.norm(self.proj(x)), dim=-1)


def test_custom_ops_run_inside_torch_compile(tmp_path):
    # aot_eager traces the graph through the custom ops' fake implementations, as inductor does,
    # without inductor's C++ compile, which takes minutes on this CPU.
    torch.manual_seed(0)
    model, x = NormedSoftmax().eval(), torch.randn(4, 32)
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 64}], "rmsnorm": [{"M": 4, "N": 64}]})
    graph_ops = []

    def recording_backend(graph_module, example_inputs):
        graph_ops.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return torch._dynamo.lookup_backend("aot_eager")(graph_module, example_inputs)

    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, folder)
        model(x)                          # the eager call checks the RMSNorm module route
        compiled = torch.compile(model, backend=recording_backend)
        assert plugin.output_error(expected, compiled(x)) <= plugin.tolerance(expected)
    ours = sorted({op.split(".")[1].rsplit("_", 1)[0] for op in graph_ops if op.startswith("autokernel.")})
    assert ours == ["rmsnorm_2", "softmax_1"]


# --------------------------------------------------------------------------- errors and the error measure
def test_manifest_entry_from_a_job_loads_the_file_it_names(tmp_path):
    job = {"rank": 3, "kernel_type": "softmax", "shapes": [{"M": 4, "N": 64}], "dtype": "float16", "share": 0.2}
    plugin.write_manifest(tmp_path / "opt" / MANIFEST_NAME,
                          {"3_softmax": plugin.manifest_entry(job, starter_path("softmax"))})
    assert plugin.read_manifest(tmp_path / "opt" / MANIFEST_NAME) == {"3_softmax": {
        "file": str(starter_path("softmax")), "kernel_type": "softmax", "rank": 3, "shapes": [{"M": 4, "N": 64}],
        "dtypes": ["float16"]}}
    (kernel,) = plugin.load_kernels(tmp_path / "opt")
    # An absolute file is used as it is, not looked for in the manifest's folder.
    assert (kernel.name, kernel.file, kernel.rank) == ("3_softmax", starter_path("softmax"), 3)
    assert kernel.covers({"M": 4, "N": 64}, torch.float16) and not kernel.covers({"M": 4, "N": 64}, torch.float32)


def test_bad_optimized_folders_give_clear_errors(tmp_path):
    with pytest.raises(plugin.PlugInError, match="manifest.json does not exist"):
        plugin.load_kernels(tmp_path / "nothing")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(plugin.PlugInError, match="is not valid JSON"):
        plugin.load_kernels(tmp_path / "broken")
    (tmp_path / "broken" / MANIFEST_NAME).write_text(json.dumps({"1_softmax": {}}))
    with pytest.raises(plugin.PlugInError, match='no "kernels" object'):
        plugin.load_kernels(tmp_path / "broken")
    wrong_type = write_optimized(tmp_path / "wrong", {"softmax": [{"M": 1, "N": 1}]},
                                 sources={"softmax": reference_kernel("rmsnorm")})
    with pytest.raises(plugin.PlugInError, match="KERNEL_TYPE 'rmsnorm'"):
        plugin.load_kernels(wrong_type)
    bad_dtype = write_optimized(tmp_path / "dtype", {"softmax": [{"M": 1, "N": 1}]}, dtypes=("fp8",),
                                sources=reference_sources("softmax"))
    with pytest.raises(plugin.PlugInError, match="unknown dtypes"):
        plugin.load_kernels(bad_dtype)


def test_output_error_is_relative_to_the_output_scale():
    expected = torch.tensor([100.0, -200.0, 0.5])
    assert plugin.output_error(expected, expected + torch.tensor([0.0, 2.0, 0.0])) == pytest.approx(0.01)
    assert plugin.output_error((expected, {"ids": torch.tensor([1, 2])}),
                               (expected, {"ids": torch.tensor([1, 2])})) == 0.0
    assert plugin.output_error(torch.tensor([float("inf"), float("nan")]),
                               torch.tensor([float("inf"), float("nan")])) == 0.0
    assert plugin.output_error(expected, torch.tensor([100.0, float("nan"), 0.5])) == math.inf
    assert plugin.output_error(torch.tensor([1, 2]), torch.tensor([1, 3])) == math.inf
    assert plugin.output_error({"logits": expected, "extra": [expected]}, {"logits": expected}) == math.inf
    assert plugin.output_error(expected, expected.double()) == math.inf


def test_kernels_measured_slower_than_pytorch_stay_out_unless_asked(tmp_path):
    def entry(speedup, meaningful):
        job = {"rank": 1, "kernel_type": "softmax", "shapes": [{"M": 4, "N": 8}], "dtype": "float32"}
        return {**plugin.manifest_entry(job, starter_path("softmax")), "best_speedup_vs_pytorch": speedup,
                "timings_meaningful": meaningful}

    folder = tmp_path / "opt"
    plugin.write_manifest(folder / MANIFEST_NAME, {"1_softmax": entry(0.54, True), "2_softmax": entry(1.3, True),
                                                   "3_softmax": entry(0.2, False)})
    assert plugin.slower_than_pytorch(folder) == {"1_softmax": 0.54}
    # A CPU-interpreter timing says nothing about speed, so it never keeps a kernel out.
    assert [k.name for k in plugin.load_kernels(folder)] == ["2_softmax", "3_softmax"]
    assert [k.name for k in plugin.load_kernels(folder, include_slower=True)] == ["1_softmax", "2_softmax",
                                                                                 "3_softmax"]
