"""Every kind of model a region covers, end to end through the interpreter: its region is found, its starter (Inductor's
code) passes the judge's five stages, and plugged in, the kernel runs in the region's place with the same output."""

from __future__ import annotations

import pytest
import torch

from autokernel.core.contracts import ManifestEntry
from autokernel.judge import runner
from autokernel.kernel_types.regions import store
from autokernel.profile.regions.find import find_regions
from autokernel.routing import plugin
from autokernel.routing.manifest import write_manifest
from tests.regions import small_models as models
from tests.regions.starters import starter_for

# Every test here starts real judges or the loop in child processes: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

KINDS = {
    "gelu": (models.Gelu, lambda: (models.rows(),)),
    "tanh_gelu_in_ops": (models.TanhGelu, lambda: (models.rows(),)),
    "log_softmax": (models.LogSoftmax, lambda: (models.rows(),)),
    "l2_norm": (models.L2Norm, lambda: (models.rows(),)),
    "l1_norm": (models.L1Norm, lambda: (models.rows(),)),
    "hinge_loss": (models.Hinge, lambda: (models.rows(), models.rows().sign())),
    "matrix_vector": (models.MatVec, lambda: (torch.randn(16, 32), torch.randn(32, 1))),
    "gemm_sigmoid_rowsum": (models.GemmSigmoidRowSum, lambda: (models.rows(),)),
    "multihead_attention": (models.MultiheadAttention, lambda: (models.tokens(),)),
    "vit_block": (models.VitBlock, lambda: (models.tokens(),)),
    "conv_bn_relu": (models.ConvBnRelu, lambda: (models.images(),)),
    "max_pool": (models.MaxPool, lambda: (models.images(),)),
    "depthwise_conv": (models.DepthwiseConv, lambda: (models.images(4, 4),)),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_region_of_each_kind_is_found_judged_and_routed(kind, tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path / "regions"))
    make_model, make_inputs = KINDS[kind]
    model, inputs = make_model().eval(), make_inputs()
    found = find_regions(model, inputs)
    assert found.regions, found.skipped
    region = max(found.regions, key=lambda r: len(r.definition.nodes))     # the largest, for the multi-region ones
    path = starter_for(region, str(tmp_path / "regions"))

    result = runner.run_bench(path, shapes=[region.shape()], dtype=region.definition.dtype, timeout_s=300, seed=3,
                              extra_args=["--quick"])
    assert result.correctness == "PASS", result.message
    assert len(result.stages) == 5

    folder = tmp_path / "optimized"
    store.copy_to(region.name, folder)
    (folder / path.name).write_text(path.read_text())
    entry = ManifestEntry(file=path.name, kernel_type=region.name, rank=1, shapes=[region.shape()],
                          dtypes=[region.definition.dtype]).to_json()
    write_manifest(folder / "manifest.json", {f"1_{region.name}": entry})
    with torch.no_grad():
        expected = model(*inputs)
        plugin.plug_in(model, folder, policy="all")
        try:
            model(*inputs)                              # resolves the routes as the model is
            got = model(*inputs)
            summary = plugin.router_of(model).summary()
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert summary["kernels"][0]["hits"] >= 1, summary
