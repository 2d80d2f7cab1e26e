"""Tests for autokernel/routing/plugin.py, continued: the forms real models and KernelBench problem files use
(reductions over any dim, norms over dim 1 and the last dims, inline norms), planned by the profiler
and routed by their starters, eagerly and under torch.compile (issue 11.4)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.core.paths import ROOT  # noqa: E402
from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from tests.plugin_helpers import one_forward_stats, recording_backend, write_optimized  # noqa: E402


# --------------------------------------------------------------------------- KernelBench problem files (issue 11.4)
def load_problem(name: str):
    """A problem module from benchmarks/problems (Model, get_inputs, get_init_inputs)."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location(f"problem_{name}", ROOT / "benchmarks" / "problems" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module        # torch.compile looks the model's module up by name
    spec.loader.exec_module(module)
    return module


def planned_sites(model, inputs) -> dict:
    """kernel type -> [(module path, shape)] the profiler plans for this model."""
    from autokernel.profile import profiler
    report = profiler.profile_model(model, inputs, warmup=1, iters=1, name="problem")
    sites = {}
    for site in report.call_sites:
        sites.setdefault(site.kernel_type, []).append((site.module_path, site.shape))
    return sites


def routes_as_planned(tmp_path, model, inputs, kernel_type: str) -> tuple[dict, dict]:
    """Plug the starter of kernel_type in at the shapes the profiler planned; (planned sites, one forward's stats)."""
    sites = planned_sites(model, inputs)
    folder = write_optimized(tmp_path / "opt", {kernel_type: [shape for _, shape in sites[kernel_type]]})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy=ALL)
        actual = model(*inputs)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)
    return sites, one_forward_stats(model, inputs)


# Small versions of the problem files' shapes (their forwards take any size).
PROBLEMS = [
    ("sum_middle", (torch.randn(3, 20, 9),), "reduce", ("", {"O": 3, "R": 20, "I": 9, "op": "sum"})),
    ("max_middle", (torch.randn(3, 20, 9),), "reduce", ("", {"O": 3, "R": 20, "I": 9, "op": "max_dim"})),
    ("max_indices_middle", (torch.randn(3, 20, 9),), "reduce", ("", {"O": 3, "R": 20, "I": 9, "op": "max_dim"})),
    ("rmsnorm_dim1", (torch.randn(2, 8, 5, 6),), "rmsnorm", ("", {"M": 2, "N": 8, "I": 30})),
    ("layernorm_last3", (torch.randn(2, 8, 5, 6),), "layernorm", ("ln", {"M": 2, "N": 240})),
]


@pytest.mark.parametrize("name, inputs, kernel_type, site", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_a_problem_file_is_planned_and_routed_by_its_starter(tmp_path, name, inputs, kernel_type, site):
    problem = load_problem(name)
    init = [(8, 5, 6)] if name == "layernorm_last3" else problem.get_init_inputs()
    model = problem.Model(*init).eval()
    sites, stats = routes_as_planned(tmp_path, model, inputs, kernel_type)
    assert sites == {kernel_type: [site]}      # the whole forward is one kernel, nothing left as other
    assert stats == {kernel_type: (1, 0)}


class MaxWithIndices(nn.Module):
    """torch.max / torch.min over a dim as models use the pair: values, indices, [0], keepdim; and torch.max of
    two tensors, elementwise, which stays PyTorch's."""

    def forward(self, x):
        best = torch.max(x, dim=1)
        low = x.min(-1, keepdim=True)
        return best.values, best.indices, best[0] * 2, low.values, low[1], torch.max(x, x.flip(1))


def test_max_and_min_with_indices_are_planned_and_routed_with_pytorchs_indices(tmp_path):
    x = torch.randint(-3, 4, (3, 20, 9)).float()        # ties in every line: the first index must win
    x[0, 4, 2] = x[0, 9, 2] = float("nan")
    x[1, :, 3] = -float("inf")
    model = MaxWithIndices().eval()
    shapes = [shape for _, shape in planned_sites(model, (x,))["reduce"]]
    assert sorted(shape["op"] for shape in shapes) == ["max_dim", "min_dim"]
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, write_optimized(tmp_path / "opt", {"reduce": shapes}), policy=ALL)
        routed = model(x)
    for ours, own in zip(routed, expected):
        assert ours.dtype == own.dtype and ours.shape == own.shape
        torch.testing.assert_close(ours, own, atol=0, rtol=0, equal_nan=True)
    assert one_forward_stats(model, (x,)) == {"reduce": (2, 1)}
    [kernel] = plugin.router_of(model).summary()["kernels"]
    assert kernel["fallback_reasons"] == {"torch.max of two tensors: elementwise, not a reduction": 1}


def test_a_kernel_verified_for_amax_does_not_take_max_with_indices(tmp_path):
    # The shapes differ by op: an amax job's kernel is never handed a call that must return indices.
    model, inputs = load_problem("max_middle").Model(1).eval(), (torch.randn(3, 20, 9),)
    plugin.plug_in(model, write_optimized(tmp_path / "opt", {"reduce": [{"O": 3, "R": 20, "I": 9, "op": "max"}]}),
                   policy=ALL)
    with torch.no_grad():
        model(*inputs)                  # the resolution pass: the call is read, and left to PyTorch
    [kernel] = plugin.router_of(model).summary()["kernels"]
    assert kernel["hits"] == 0 and kernel["fallback_reasons"] == {"shape O=3,R=20,I=9,op=max_dim not verified": 1}
    assert one_forward_stats(model, inputs) == {"reduce": (0, 0)}     # and not intercepted again


def test_max_with_indices_is_left_to_torch_compile_inside_a_graph(tmp_path):
    # A kernel's graph op has the reference's one-tensor schema: the pair is routed eagerly, and a
    # compiled graph traces PyTorch's own torch.max, with no graph break.
    from torch._dynamo.utils import counters

    model, x = load_problem("max_middle").Model(1).eval(), torch.randn(3, 20, 9)
    recording, graph_ops = recording_backend()
    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, write_optimized(tmp_path / "opt", {"reduce": [{"O": 3, "R": 20, "I": 9,
                                                                              "op": "max_dim"}]}), policy=ALL)
        model(x)
        compiled = torch.compile(model, backend=recording, fullgraph=True)
        torch.testing.assert_close(compiled(x), expected, atol=0, rtol=0)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert not any(op.startswith("autokernel.") for op in graph_ops)
    assert any("method max of" in op for op in graph_ops)                # torch.max itself, in the graph
    assert one_forward_stats(model, (x,)) == {"reduce": (1, 0)}       # eagerly, still ours
    torch._dynamo.reset()


class Reduction(nn.Module):
    def __init__(self, reduce):
        super().__init__()
        self.reduce = reduce

    def forward(self, x):
        return self.reduce(x)


REDUCTIONS = {
    "amax dim 1": (lambda x: torch.amax(x, dim=1), {"O": 3, "R": 20, "I": 9, "op": "max"}),
    "Tensor.amin keepdim": (lambda x: x.amin(1, keepdim=True), {"O": 3, "R": 20, "I": 9, "op": "min"}),
    "mean dim 0": (lambda x: torch.mean(x, 0), {"O": 1, "R": 3, "I": 180, "op": "mean"}),
    "Tensor.mean (1, 2)": (lambda x: x.mean((1, 2)), {"O": 3, "R": 180, "I": 1, "op": "mean"}),
    "sum dim -1 keepdim": (lambda x: x.sum(-1, keepdim=True), {"O": 60, "R": 9, "I": 1, "op": "sum"}),
    "sum of all": (lambda x: x.sum(), {"O": 1, "R": 540, "I": 1, "op": "sum"}),
}


@pytest.mark.parametrize("form", list(REDUCTIONS))
def test_every_reduction_form_is_planned_and_routed_at_one_shape(tmp_path, form):
    reduce, shape = REDUCTIONS[form]
    sites, stats = routes_as_planned(tmp_path, Reduction(reduce).eval(), (torch.randn(3, 20, 9),), "reduce")
    assert sites == {"reduce": [("", shape)]}
    assert stats == {"reduce": (1, 0)}


def test_max_and_min_through_the_router_keep_nan_and_inf(tmp_path):
    x = torch.randn(3, 20, 9)
    x[0, 4, 2], x[1, :, 3], x[2, 7, 8] = float("nan"), float("inf"), -float("inf")
    for reduce in (REDUCTIONS["amax dim 1"][0], REDUCTIONS["Tensor.amin keepdim"][0]):
        model = Reduction(reduce).eval()
        shape = planned_sites(model, (x,))["reduce"][0][1]
        plugin.plug_in(model, write_optimized(tmp_path / shape["op"], {"reduce": [shape]}), policy=ALL)
        with torch.no_grad():
            torch.testing.assert_close(model(x), reduce(x), atol=0, rtol=0, equal_nan=True)
        assert one_forward_stats(model, (x,)) == {"reduce": (1, 0)}


class ChannelRMSNorm(nn.Module):
    """RMSNorm over the channels of (B, C, H, W) with a weight of C, in the inline form."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(channels))
        self.eps = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + self.eps) * self.weight[:, None, None]


class WeightlessRMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-5

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x ** 2, dim=-1, keepdim=True) + self.eps)


@pytest.mark.parametrize("model, shape", [
    (ChannelRMSNorm(8), {"M": 2, "N": 8, "I": 30}),
    (WeightlessRMSNorm(), {"M": 2 * 8 * 5, "N": 6}),
], ids=["over dim 1 with a weight", "over the last dim without a weight"])
def test_inline_rmsnorm_modules_are_planned_and_routed(tmp_path, model, shape):
    sites, stats = routes_as_planned(tmp_path, model.eval(), (torch.randn(2, 8, 5, 6),), "rmsnorm")
    assert sites == {"rmsnorm": [("", shape)]}
    assert stats == {"rmsnorm": (1, 0)}


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channels of (B, C, L), written inline."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = 1e-5

    def forward(self, x):
        centered = x - x.mean(1, keepdim=True)
        normed = centered * torch.rsqrt(centered.pow(2).mean(1, keepdim=True) + self.eps)
        return normed * self.weight[:, None] + self.bias[:, None]


def test_an_inline_layernorm_over_channels_is_planned_and_routed(tmp_path):
    sites, stats = routes_as_planned(tmp_path, ChannelLayerNorm(8).eval(), (torch.randn(2, 8, 7),), "layernorm")
    assert sites == {"layernorm": [("", {"M": 2, "N": 8, "I": 7})]}
    assert stats == {"layernorm": (1, 0)}


@pytest.mark.parametrize("name, kernel_type", [("sum_middle", "reduce"), ("rmsnorm_dim1", "rmsnorm")])
def test_a_routed_problem_compiles_into_one_graph_with_the_kernels_op(tmp_path, name, kernel_type):
    # The new forms trace as the old did: the mean route and the weightless channel norm (whose
    # weight of ones is made inside the launch) add no graph break under torch.compile.
    from torch._dynamo.utils import counters

    problem = load_problem(name)
    model, x = problem.Model(*problem.get_init_inputs()).eval(), torch.randn(2, 8, 5, 6)
    shape = planned_sites(model, (x,))[kernel_type][0][1]
    recording, graph_ops = recording_backend()

    torch._dynamo.reset()
    counters.clear()
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, write_optimized(tmp_path / "opt", {kernel_type: [shape]}), policy=ALL)
        model(x)
        compiled = torch.compile(model, backend=recording, fullgraph=True)
        torch.testing.assert_close(compiled(x), expected, atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert any(op.startswith(f"autokernel.{kernel_type}") for op in graph_ops)
    torch._dynamo.reset()
