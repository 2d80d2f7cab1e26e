"""Regions found in small models: which ops each holds, its inputs and outputs, what it leaves to the menu."""

from __future__ import annotations

import torch

from autokernel.profile.regions.find import find_regions
from tests.regions import small_models as models


def only_region(model, *inputs):
    found = find_regions(model, inputs)
    assert len(found.regions) == 1, [r.describe() for r in found.regions] + found.skipped
    return found.regions[0], found


def test_a_gemm_with_a_reducing_epilogue_is_one_region_whose_output_is_the_row_sums():
    region, found = only_region(models.GemmSigmoidRowSum(), models.rows())
    assert region.ops() == ["t", "addmm", "sigmoid", "sum"][1:] or region.ops() == ["addmm", "sigmoid", "sum"]
    [output] = region.definition.output_nodes()
    assert output.shape == [8, 1]
    assert [i.name for i in region.definition.inputs] == ["weight", "bias", "x"]
    assert region.definition.inputs[0].shape == [48, 32]          # the weight as the model holds it, not its .t()
    assert {call[0] for call in found.taken[region.name]} == {"matmul", "reduce"}
    assert any("sigmoid" in line.code for line in region.about.sources)


def test_the_region_reference_computes_what_the_model_does():
    model = models.GemmSigmoidRowSum()
    x = models.rows()
    region, _ = only_region(model, x)
    inputs = {"weight": model.linear.weight, "bias": model.linear.bias, "x": x}
    with torch.no_grad():
        torch.testing.assert_close(region.definition.run(inputs), model(x))


def test_pointwise_chains_written_out_are_one_region_each():
    for model in (models.Gelu(), models.TanhGelu(), models.LogSoftmax(), models.L2Norm(), models.L1Norm()):
        region, _ = only_region(model, models.rows())
        assert len(region.definition.outputs) == 1
        assert region.definition.output_nodes()[0].shape == [8, 32]


def test_a_loss_is_one_region_with_a_scalar_output():
    predictions, targets = models.rows(), torch.randn(8, 32).sign()
    region, _ = only_region(models.Hinge(), predictions, targets)
    assert region.definition.output_nodes()[0].shape == []
    assert {"clamp", "mean"} <= set(region.ops())


def test_a_lone_op_of_a_menu_type_stays_the_menus():
    found = find_regions(models.LoneSoftmax(), (models.rows(),))
    assert found.regions == [] and any("menu" in why for why in found.skipped)


def test_a_repeated_block_is_one_region_with_two_instances():
    found = find_regions(models.Repeated(), (models.rows(),))
    [region] = found.regions
    assert region.about.instances == 2 and region.ops() == ["addmm", "gelu", "mul"]


def test_inputs_get_the_domain_their_ops_need():
    region, _ = only_region(models.LogOfSum(), models.rows().abs() + 0.1)
    assert [i.domain for i in region.definition.inputs] == ["positive"]
    ids = torch.randint(0, 20, (4, 6))
    region, _ = only_region(models.Embedding(), ids)
    by_name = {i.name: i for i in region.definition.inputs}
    assert by_name["ids"].domain == "index" and by_name["ids"].index_bound == 20


def test_ids_that_reach_an_embedding_through_a_gather_are_drawn_below_its_rows():
    """BERT's token types: on the H200 they were drawn up to 8 for an embedding of 2 rows (a device-side assert
    that ended verify); here the drawing raised IndexError. The gather passes the embedding's bound back."""
    region, _ = only_region(models.GatheredTokenTypes(), torch.randn(1, 16, 32))
    by_name = {i.name: i for i in region.definition.inputs}
    assert (by_name["token_type_ids"].domain, by_name["token_type_ids"].index_bound) == ("index", 2)
    assert (by_name["position_ids"].domain, by_name["position_ids"].index_bound) == ("index", 16)


def test_a_matrix_vector_product_takes_its_epilogue():
    a, b = torch.randn(16, 32), torch.randn(32, 1)
    region, _ = only_region(models.MatVec(), a, b)
    assert region.ops()[0] == "mm" and region.definition.output_nodes()[0].shape == [16, 1]


def test_ops_that_read_no_tensor_are_no_region():
    """A mask made from arange is a constant of the shapes: no region (its starter once failed on inputs[0])."""
    q = torch.randn(1, 2, 8, 16)
    found = find_regions(models.CausalMaskAttention(), (q, q, q))
    assert found.regions == []
    assert any("arange" in why and "reads no tensor" in why for why in found.skipped), found.skipped
