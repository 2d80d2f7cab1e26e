"""Convolutions and pooling are planned: a convolution heads a region with its epilogue (bias, batch norm,
activation), or is one alone; pooling is fusible; each region's starter is Inductor's Triton templates and kernels."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.core.kernel_file import import_file  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.kernel_types.regions.kernel_type import head_flops  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from tests.regions import small_models as models  # noqa: E402
from tests.regions.starters import starter_for  # noqa: E402


def only_region(model, *inputs):
    found = find_regions(model.eval(), inputs)
    assert len(found.regions) == 1, [r.describe() for r in found.regions] + found.skipped
    return found.regions[0]


def test_a_convolution_heads_its_bias_batch_norm_and_activation():
    region = only_region(models.ConvBnRelu(), models.images())
    assert region.ops() == ["convolution", "native_batch_norm", "relu"]
    assert region.about.kinds == ["convolution", "normalization", "pointwise"]
    by_name = {item.name: item for item in region.definition.inputs}
    assert by_name["running_var"].domain == "positive"            # under batch norm's square root
    assert region.definition.output_nodes()[0].shape == [1, 4, 6, 6]
    # 2 * outputs * (C_in * 3 * 3): the convolution's multiply-adds
    assert head_flops(region.definition) == 2 * (4 * 6 * 6) * (3 * 3 * 3)


def test_pooling_and_a_lone_convolution_are_regions():
    assert only_region(models.MaxPool(), models.images()).ops() == ["max_pool2d_with_indices"]
    region = only_region(models.DepthwiseConv(), models.images(4))
    assert region.ops() == ["convolution"] and [i.name for i in region.definition.inputs] == ["x", "weight"]


def test_a_cnns_convolutions_all_head_regions():
    """A ResNet block: every convolution is in a region, the residual add and the pooling in one with the rest."""
    model = torch.nn.Sequential(models.ConvBnRelu(3, 4), models.MaxPool(), models.ConvBnRelu(4, 4),
                                torch.nn.AdaptiveAvgPool2d(1))
    found = find_regions(model.eval(), (models.images(3, 8),))
    ops = [op for region in found.regions for op in region.ops()]
    assert ops.count("convolution") == 2 and "max_pool2d_with_indices" in ops and "mean" in ops, ops


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    return str(tmp_path)


@pytest.mark.parametrize("make_model, make_inputs", [
    (models.ConvBnRelu, lambda: models.images()),
    (models.MaxPool, lambda: models.images()),
    (models.DepthwiseConv, lambda: models.images(4, 4)),
    (lambda: torch.nn.Sequential(torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
                                 torch.nn.ReLU()), lambda: models.images(3, 3)),
    (lambda: torch.nn.Sequential(torch.nn.Conv1d(3, 2, 3), torch.nn.Tanh()), lambda: models.images(3, 5)[:, :, 0]),
], ids=["conv_bn_relu", "max_pool", "depthwise_conv", "conv_transpose2d", "conv1d"])
def test_a_convolution_or_pooling_starter_computes_its_region(folder, make_model, make_inputs):
    region = only_region(make_model(), make_inputs())
    path = starter_for(region, folder)
    source = path.read_text()
    assert "extern_kernels" not in source and "@triton.jit" in source
    module = import_file(path, f"region_starter_{region.name}")
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 11, "cpu")
    torch.testing.assert_close(module.kernel_fn(**inputs), kt.reference(**inputs), rtol=1e-4, atol=1e-5)


CONVOLUTIONS = {
    "conv1d": (torch.nn.Conv1d(4, 6, 3, padding=1), (2, 4, 9)),
    "conv2d_strided": (torch.nn.Conv2d(4, 6, 3, stride=2, padding=1), (1, 4, 7, 7)),
    "conv_transpose1d": (torch.nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1), (1, 4, 5)),
    "conv_transpose2d": (torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                                  groups=2), (1, 4, 4, 5)),
    "conv_transpose3d": (torch.nn.ConvTranspose3d(2, 3, 3, stride=2, bias=False), (1, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("name", list(CONVOLUTIONS))
def test_the_convolution_inductor_compiles_for_a_starter_computes_the_regions(name):
    """Biases peeled, 1-D as 2-D and transposed as ordinary: the graph Inductor compiles equals the region's ops."""
    from autokernel.kernel_types.regions.inputs import make_inputs
    from autokernel.profile.regions.inductor import region_module

    module, shape = CONVOLUTIONS[name]
    region = only_region(module, torch.randn(shape))
    definition = region.definition
    inputs = make_inputs(definition, torch.Generator().manual_seed(0), "cpu")
    graph = region_module(definition, torch.device("cpu"))
    assert "transpose" not in name or [n for n in graph.graph.nodes if n.target is torch.ops.aten.flip.default]
    [got] = graph(*(inputs[item.name] for item in definition.inputs))
    torch.testing.assert_close(got, definition.run(inputs), rtol=1e-5, atol=1e-5)


def test_a_convolution_templates_tiles_are_tunables_and_any_choice_computes_the_region(folder):
    from autokernel.agents.tunables import read_tunables, rewrite_tunables

    region = only_region(models.ConvBnRelu(), models.images())
    path = starter_for(region, folder)
    source = path.read_text()
    tunables, choices = read_tunables(source)
    [template] = [key.removesuffix("_BLOCK_M") for key in tunables if key.endswith("_BLOCK_M")]
    assert {f"{template}_BLOCK_N", f"{template}_BLOCK_K"} <= set(tunables) and "BLOCK_M : tl.constexpr = " not in source
    assert choices[f"{template}_BLOCK_K"] == [16, 32, 64, 128]            # every load is masked: any tile tl.dot takes
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 12, "cpu")
    for index, tiles in enumerate(({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16},
                                   {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 32})):
        changed = path.with_name(f"conv_retiled_{index}.py")
        changed.write_text(rewrite_tunables(source, {**tunables, **{f"{template}_{k}": v for k, v in tiles.items()}}))
        module = import_file(changed, f"region_starter_conv_retiled_{index}")
        torch.testing.assert_close(module.kernel_fn(**inputs), kt.reference(**inputs), rtol=1e-4, atol=1e-5)
