"""Routing regions: a kept region kernel runs wherever the model computes its region, eagerly and under torch.compile,
and only where the decision says so."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autokernel.core.contracts import ManifestEntry
from autokernel.kernel_types.regions import store
from autokernel.kernel_types.regions.capture import aten_graph, capture
from autokernel.profile.regions.find import find_regions
from autokernel.routing import plugin
from autokernel.routing.manifest import write_manifest
from autokernel.routing.regions import matching
from tests.regions import small_models as models
from tests.regions.starters import made


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """An optimized-kernels folder holding the GEMM -> sigmoid -> row-sum region's starter."""
    folder = tmp_path_factory.mktemp("optimized")
    region, path = made("gemm_sigmoid_rowsum", str(folder))
    store.add_folder(folder)
    store.copy_to(region.name, folder)
    entry = ManifestEntry(file=path.name, kernel_type=region.name, rank=1, shapes=[region.shape()],
                          dtypes=["float32"]).to_json()
    write_manifest(folder / "manifest.json", {f"1_{region.name}": entry})
    return folder, region


class Twice(nn.Module):
    """The region twice, on two inputs, and a value computed beside it."""

    def __init__(self):
        super().__init__()
        self.first, self.second = models.GemmSigmoidRowSum(), models.GemmSigmoidRowSum()

    def forward(self, x, y):
        return self.first(x) + self.second(y), torch.relu(x).mean()


class ReadsInside(nn.Module):
    """The region's GEMM result is also returned: replacing the region would not remove it."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 48)

    def forward(self, x):
        product = self.linear(x)
        return torch.sigmoid(product).sum(dim=1, keepdim=True), product


def test_the_region_is_found_each_time_the_model_computes_it_and_nowhere_else(kernels):
    _, region = kernels
    [graph] = capture(Twice(), (models.rows(), models.rows()))
    assert len(matching.find(graph.module.graph, region.definition)) == 2
    [graph] = capture(ReadsInside(), (models.rows(),))
    assert matching.find(graph.module.graph, region.definition) == []


def test_a_region_computed_on_another_device_than_the_kernels_is_passed_over(kernels):
    # A Triton kernel on the GPU takes no CPU tensor; the graph here computes on the CPU.
    _, region = kernels
    [graph] = capture(Twice(), (models.rows(), models.rows()))
    assert len(matching.find(graph.module.graph, region.definition, device="cpu")) == 2
    assert matching.find(graph.module.graph, region.definition, device="cuda") == []


def test_eagerly_the_kernel_runs_in_the_regions_place(kernels):
    folder, region = kernels
    model, x, y = Twice(), models.rows(), models.rows()
    with torch.no_grad():
        expected = model(x, y)
        plugin.plug_in(model, folder, policy="all")
        try:
            first, second = model(x, y), model(x, y)      # the first call resolves the routes as it is
            summary = plugin.router_of(model).summary()
        finally:
            plugin.unplug(model)
    for got in (first, second):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    [kernel] = summary["kernels"]
    assert kernel["hits"] == 2 and summary["regions"][0]["replaced"] == 2


def test_the_eager_forward_is_traced_with_the_flag_a_rewrite_reads_to_keep_its_eager_decision(kernels, monkeypatch):
    # A batch norm fold decides per mode (autokernel/routing/bn_folding.py): inside this Dynamo trace it is eager.
    from autokernel.routing.regions.routing import RegionRouting

    folder, _ = kernels
    seen, backend = [], RegionRouting.eager_backend

    def recording(self, gm, example_inputs):
        seen.append(self.tracing_eagerly)
        return backend(self, gm, example_inputs)
    monkeypatch.setattr(RegionRouting, "eager_backend", recording)
    model, x, y = Twice(), models.rows(), models.rows()
    with torch.no_grad():
        plugin.plug_in(model, folder, policy="all")
        try:
            model(x, y), model(x, y)
            regions = plugin.router_of(model).regions
        finally:
            plugin.unplug(model)
    assert seen == [True] and regions.tracing_eagerly is False


def test_the_measured_policy_routes_no_region_without_a_measurement(kernels):
    folder, _ = kernels
    model, x = models.GemmSigmoidRowSum(), models.rows()
    with torch.no_grad():
        plugin.plug_in(model, folder)                       # "measured": nothing measured on this CPU
        try:
            model(x), model(x)
            summary = plugin.router_of(model).summary()
        finally:
            plugin.unplug(model)
    # With no region routed eagerly the model runs as it is, not through the rewritten graph.
    assert summary["kernels"][0]["hits"] == 0 and summary["regions"][0]["replaced"] == 0


def test_under_torch_compile_the_regions_backend_puts_the_kernels_op_in_the_graph(kernels):
    folder, _ = kernels
    model, x = models.GemmSigmoidRowSum(), models.rows()
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, folder, policy="all")
        try:
            model(x)
            compiled = torch.compile(model, backend=plugin.compile_backend(model))
            got = compiled(x)
            router = plugin.router_of(model)
            replaced, op_kind = router.regions.replaced.copy(), router.kernels[0].op_kind
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert sum(replaced.values()) == 1 and op_kind.startswith("custom_op")


def test_under_torch_compile_a_bypassed_router_compiles_pytorchs_own_graph_beside_ours(kernels):
    # verify times ours and PyTorch's own compiled path in turn, the second under router.bypassed(): the H200 showed
    # both sides running our kernel (1.00x on four GEMM regions whose kernel ran 1.8x faster alone), because nothing
    # made Dynamo compile the bypassed forward again.
    folder, _ = kernels
    model, x = models.GemmSigmoidRowSum(), models.rows()
    seen = []
    with torch.no_grad():
        plugin.plug_in(model, folder, policy="all")
        try:
            model(x)
            router = plugin.router_of(model)
            ours = plugin.compile_backend(model)

            def backend(gm, example_inputs):
                seen.append((router.bypass, sum(router.regions.replaced.values())))
                return ours(gm, example_inputs)
            compiled = torch.compile(model, backend=backend)
            compiled(x)
            with router.bypassed():
                compiled(x)
            compiled(x)
            replaced = sum(router.regions.replaced.values())
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    assert seen == [(False, 0), (True, 1)] and replaced == 1      # compiled once each way, the region replaced once


@pytest.mark.parametrize("make_model, make_input, instances", [
    (models.DeepNarrowMLP, lambda: models.rows(2, 16), 4),
    (lambda: nn.Sequential(models.ResidualBlock(), models.ResidualBlock(), models.ResidualBlock()),
     lambda: models.images(4, 5), 3),
], ids=["deep_narrow_mlp", "resnet_blocks"])
def test_regions_in_a_chain_are_all_replaced_each_reading_what_replaced_the_last(make_model, make_input, instances):
    """Each region reads the one before it (DeepNarrowMLP's Linear + ReLU; a ResNet block's convolution and its
    residual add, both reading the block before): the rewrite once read a replaced node (KeyError relu_1, relu_2)."""
    model, x = make_model().eval(), make_input()
    region = max(find_regions(model, (x,)).regions, key=lambda r: r.about.instances)    # found at every block
    definition = region.definition
    calls = []

    def kernel(*inputs):          # the region's own reference in the kernel's place
        calls.append(len(inputs))
        return definition.run(dict(zip((item.name for item in definition.inputs), inputs)))

    def replace(aten):
        matches = matching.find(aten.graph, definition)
        assert len(matches) == instances
        matching.replace(aten, matches, kernel, len(definition.outputs))

    _assert_rewritten_model_computes_the_same(model, x, replace)
    assert calls == [len(definition.inputs)] * instances


def test_a_region_that_reads_a_replaced_regions_output_is_still_found():
    """Two kernels in a row (Linear + GELU, then Linear + sigmoid; a CNN's every block): once the first is replaced,
    the second still finds its input, whose layout the replacement keeps."""
    model = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 8), nn.Sigmoid()).eval()
    x = models.rows(4, 16)
    first, second = sorted((r.definition for r in find_regions(model, (x,)).regions),
                           key=lambda definition: "gelu" not in str(definition.nodes))
    found = []

    def as_reference(definition):
        names = [item.name for item in definition.inputs]
        return lambda *inputs: definition.run(dict(zip(names, inputs)))

    def replace(aten):
        for definition in (first, second):
            matches = matching.find(aten.graph, definition)
            found.append(len(matches))
            matching.replace(aten, matches, as_reference(definition), len(definition.outputs))

    _assert_rewritten_model_computes_the_same(model, x, replace)
    assert found == [1, 1]


def _assert_rewritten_model_computes_the_same(model, x, replace) -> None:
    """The model compiled through a backend that rewrites its ATen graph with replace(aten), as the regions' backend
    does, computes what the model does."""
    def backend(gm, example_inputs):
        aten = aten_graph(gm, example_inputs, fake=False)
        replace(aten)
        return matching.finish(aten)

    with torch.no_grad():
        expected = model(x)
        try:
            got = torch.compile(model, backend=backend, dynamic=False)(x)
        finally:
            torch._dynamo.reset()
    torch.testing.assert_close(got, expected)


def test_under_torch_compile_the_models_parameters_stay_static_inputs_with_a_region_replaced(kernels, monkeypatch):
    # CUDA graphs copy every input that is not static into the graph's own buffers before each replay. The
    # rewritten graph lost Dynamo's marks, so every parameter was copied on every call: on an H200 a 4-layer GPT-2
    # with one 5 us region routed ran its compiled forward at 0.45x PyTorch's own. What Inductor is told here is
    # what it is told when nothing is replaced.
    from torch._inductor import compile_fx as inductor_compile_fx

    folder, _ = kernels
    told = []
    real = inductor_compile_fx.get_static_input_idxs

    def recording(num_fixed):
        told.append(list(real(num_fixed)))
        return told[-1]
    monkeypatch.setattr(inductor_compile_fx, "get_static_input_idxs", recording)
    model, x = models.GemmSigmoidRowSum(), models.rows()
    # Every graph compiled, none read back from a cache. torch's own patch, never monkeypatch: torch's config
    # modules keep their values outside the module's __dict__, and pytest 9.2's monkeypatch undoes such a setattr
    # with a delattr, which hides the option for good (every later compile in the worker then failed with
    # "torch._functorch.config.enable_autograd_cache does not exist").
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        plugin.plug_in(model, folder, policy="all")
        try:
            model(x)
            router = plugin.router_of(model)
            compiled = torch.compile(model, backend=plugin.compile_backend(model))
            compiled(x)
            with router.bypassed():
                compiled(x)
            replaced = sum(router.regions.replaced.values())
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    parameters = len(list(model.parameters()))
    assert replaced == 1 and len(told) == 2
    ours, pytorchs = told
    assert len(pytorchs) == parameters and len(ours) >= parameters, told


def test_with_no_region_replaced_inductor_gets_dynamos_own_graph(kernels, monkeypatch):
    # verify times each kernel's route alone: with a plan that holds regions, a kernel's route (GPT-2's head) went
    # through the regions' backend, which traced the graph again with make_fx and handed Inductor that second
    # tracing even though it replaced nothing. Inductor now gets what it gets without us.
    from torch._inductor import compile_fx as inductor_compile_fx

    folder, _ = kernels
    given = []
    real = inductor_compile_fx.compile_fx
    monkeypatch.setattr(inductor_compile_fx, "compile_fx", lambda gm, *a, **k: given.append(gm) or real(gm, *a, **k))
    model, x = models.GemmSigmoidRowSum(), models.rows()
    with torch.no_grad():
        plugin.plug_in(model, folder)              # "measured", and no route table: the region routes nowhere
        try:
            expected = model(x)
            got = torch.compile(model, backend=plugin.compile_backend(model))(x)
            replaced = sum(plugin.router_of(model).regions.replaced.values())
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    torch.testing.assert_close(got, expected)
    assert replaced == 0 and len(given) == 1
    assert "dynamo_compile_id" in given[0].meta
    assert not any(isinstance(node.target, torch._ops.OpOverload) for node in given[0].graph.nodes), \
        "an ATen graph (traced again) reached Inductor"


def test_the_routing_summary_names_the_variant_a_regions_starter_runs(kernels, tmp_path):
    # On the H200 a float32 GEMM region kept 89 us after its engine tile changed, and nothing said whether the
    # region's pick had kept Inductor's template or the engine's tile.
    from autokernel.profile.regions import gemm_variant, inductor, starter

    folder, region = kernels
    store.add_folder(folder / store.FOLDER)         # where the fixture saved the region
    out = inductor.generate(region.definition, torch.device("cpu"))
    two = {gemm_variant.VARIANT: gemm_variant.variant(region, torch.device("cpu")), "inductor": (out.code, out.configs)}
    (tmp_path / "two.py").write_text(starter.write(region, two, generated_on="cpu", versions="test"))
    store.copy_to(region.name, tmp_path)
    entry = ManifestEntry(file="two.py", kernel_type=region.name, rank=1, shapes=[region.shape()],
                          dtypes=["float32"]).to_json()
    write_manifest(tmp_path / "manifest.json", {f"1_{region.name}": entry})
    rows = {}
    for name, where in (("one", folder), ("two", tmp_path)):
        model = models.GemmSigmoidRowSum()
        plugin.plug_in(model, where, policy="all")
        try:
            (rows[name],) = plugin.router_of(model).summary()["kernels"]
        finally:
            plugin.unplug(model)
    assert rows["one"]["variant"] is None                  # a starter of one variant names none
    assert rows["two"]["variant"] == gemm_variant.VARIANT   # the first is the one the file runs
