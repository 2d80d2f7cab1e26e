"""A GEMM region whose rows are read out of the input's order, or whose product is reordered before the output
(autokernel/profile/regions/epilogue_layout.py): nn.MultiheadAttention's input projection. The engine variant
takes A's rows in storage order and stores each element where the views put it, checked in Triton's interpreter
against the region's reference with the judge's tolerance."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.profile.regions import epilogue, epilogue_layout as layout, gemm_variant  # noqa: E402
from autokernel.profile.regions.epilogue_ops import Unsupported  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from benchmarks.common import load_problem  # noqa: E402
from tests.regions.test_gemm_variant import (SMALL_TILES, check, engine_source, only_region,  # noqa: E402
                                             problem_region, saved)  # noqa: F401 (a fixture)


@pytest.mark.parametrize("problem", ["multihead_attention", "vit_block"])
def test_attentions_input_projection_runs_on_the_engine_with_its_rows_and_output_reordered(problem, tmp_path):
    module = load_problem(problem, 16)
    torch.manual_seed(0)
    regions = find_regions(module.Model(*module.get_init_inputs()).eval(), tuple(module.get_inputs())).regions
    [region] = [r for r in regions if _reordered(r)]      # the ViT block's other GEMMs are plain
    e = epilogue.read(region.definition)
    assert e.a.strides[1] == 1 and e.a.strides[0] == e.K       # A by TMA: x's rows, one step apart
    source = engine_source(region)
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


def _reordered(region) -> bool:
    try:
        return epilogue.read(region.definition).out_rows is not None
    except Unsupported:
        return False


class Projection(nn.Module):
    """x (B, S, E) -> rows in (S, B) order -> x @ W^T + b -> (S, B, 2, F) -> (2, S, B, F), as MultiheadAttention."""

    def __init__(self, epilogue_after_views=None, keep_view: bool = False):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(2 * 24, 16)), nn.Parameter(torch.randn(2 * 24))
        self.after, self.keep_view = epilogue_after_views, keep_view

    def forward(self, x):           # a matmul and a bias add, as MultiheadAttention's (a lone addmm is the menu's)
        y = torch.matmul(x.transpose(0, 1).contiguous(), self.weight.t()) + self.bias
        y = y.view(*y.shape[:2], 2, 24).permute(2, 0, 1, 3)
        if self.keep_view:
            return y
        y = y.contiguous()
        return self.after(y) if self.after else y


def test_a_hand_written_projection_with_both_layouts_computes_its_reference(tmp_path):
    region = only_region(Projection(), torch.randn(3, 5, 16))
    e = epilogue.read(region.definition)
    assert e.out_rows and e.out_cols
    source = engine_source(region)
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


def test_rows_out_of_order_alone_are_stored_back_in_the_products_order(tmp_path):
    # The permute after the add moves no data, so the region ends at the add: only A's rows are out of order.
    region = only_region(Projection(keep_view=True), torch.randn(3, 5, 16))
    e = epilogue.read(region.definition)
    assert e.out_rows and e.out_cols == [(1, 48, 1)]
    check(engine_source(region), region, tmp_path, SMALL_TILES)


class Residual(nn.Module):
    """The projection's rows out of order, plus a residual read through a transpose: at the tile's rows (x's order)
    its rows are one step apart again."""

    def __init__(self, transposed: bool = True):
        super().__init__()
        self.weight, self.transposed = nn.Parameter(torch.randn(24, 16)), transposed

    def forward(self, x, residual):
        product = torch.matmul(x.transpose(0, 1).contiguous(), self.weight.t())
        return product + (residual.transpose(0, 1) if self.transposed else residual)


def test_an_epilogue_input_is_read_at_the_tiles_rows(tmp_path):
    region = only_region(Residual(), torch.randn(3, 5, 16), torch.randn(3, 5, 24))
    e = epilogue.read(region.definition)
    assert [o.strides for o in e.operands] == [(24, 1)]
    check(engine_source(region), region, tmp_path, SMALL_TILES)


class Tail(nn.Module):
    """A GEMM and a relu, then a view of the product that slices, repeats or reads by strides (a review's finds:
    each crashed the reader or was accepted and stored wrongly)."""

    def __init__(self, tail):
        super().__init__()
        self.linear, self.tail = nn.Linear(16, 48), tail

    def forward(self, x):
        return self.tail(torch.relu(self.linear(x)))


@pytest.mark.parametrize("tail", [
    lambda y: y[..., :24].reshape(-1),                                     # a slice: fewer elements
    lambda y: y.unsqueeze(0).expand(2, *y.shape).contiguous(),             # a repeat: more
    lambda y: y[:, :1].expand(y.shape[0], 2).contiguous(),                 # a repeat of as many
    lambda y: y.as_strided((48, 15), (1, 48)).contiguous(),                # by strides
])
def test_a_view_that_drops_repeats_or_strides_the_product_keeps_inductors_starter(tail):
    region = only_region(Tail(tail), torch.randn(15, 16))
    with pytest.raises(Unsupported):
        epilogue.read(region.definition)
    said = []
    assert gemm_variant.variant(region, torch.device("cpu"), said.append) is None and said


def test_a_readers_own_error_costs_the_variant_only(monkeypatch):
    region = only_region(Projection(), torch.randn(3, 5, 16))

    def broken(definition):
        raise RuntimeError("a shape the reader did not foresee")
    monkeypatch.setattr(epilogue, "read", broken)
    said = []
    assert gemm_variant.variant(region, torch.device("cpu"), said.append) is None
    assert "reading its epilogue failed: RuntimeError" in said[0] and "Inductor's starter alone" in said[0]


def test_what_the_layouts_cannot_describe_keeps_inductors_starter():
    region = only_region(Projection(torch.relu), torch.randn(3, 5, 16))     # the tile's values, reordered, then used
    with pytest.raises(Unsupported, match="after a view that reorders"):
        epilogue.read(region.definition)
    region = only_region(Residual(transposed=False), torch.randn(3, 5, 16), torch.randn(5, 3, 24))
    with pytest.raises(Unsupported, match="one step per row"):           # in the product's row order, not x's
        epilogue.read(region.definition)
    with pytest.raises(Unsupported, match="drop or repeat"):               # each element must land once
        layout.reorder_positions(["repeat"], [2, 3], lambda node, tensor: tensor[:, [0, 0, 1]])
    with pytest.raises(Unsupported, match="not copied contiguous"):        # an output left as a strided view
        layout.reorder_positions(["transpose"], [4, 6], lambda node, tensor: tensor.t())
    with pytest.raises(Unsupported, match="mixes the product's rows and columns"):
        layout.output_offsets(torch.arange(24).view(4, 6).t().contiguous().view(4, 6), None)


def test_a_row_reduction_over_rows_read_out_of_order_is_refused():
    class RowSums(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(24, 16))

        def forward(self, x):
            return torch.matmul(x.transpose(0, 1).contiguous(), self.weight.t()).sum(-1)
    region = only_region(RowSums(), torch.randn(3, 5, 16))
    with pytest.raises(Unsupported, match="reduction over the product's rows read out of order"):
        epilogue.read(region.definition)


@pytest.mark.parametrize("shape, dims", [((4, 3, 5), (1, 0, 2)), ((2, 3, 4, 5), (3, 1, 0, 2)), ((6, 7), (1, 0)),
                                         ((1, 8, 1, 3), (2, 3, 0, 1))])
def test_any_reshape_and_transpose_is_a_mixed_radix_whose_digits_rebuild_it(shape, dims):
    values = torch.arange(torch.Size(shape).numel()).view(shape).permute(dims).contiguous().reshape(-1)
    where = torch.empty_like(values)
    where[values] = torch.arange(len(values))          # where each element went: what a store needs
    digits = layout.mixed_radix(where - where[0])
    assert digits is not None
    index = torch.arange(len(values))
    assert torch.equal(sum(((index // p) % d) * s for p, d, s in digits) + where[0], where)


def test_an_order_no_reshape_and_transpose_gives_has_no_digits():
    assert layout.mixed_radix(torch.tensor([0, 5, 1, 7, 2, 3])) is None
    assert layout.mixed_radix(torch.tensor([0, 1, 2, 4])) is None     # a run of one step, then a jump that no radix fits


def test_rows_in_storage_order_takes_a_transposed_copy_and_refuses_repeated_rows():
    x_offsets = torch.arange(2 * 3 * 4).view(2, 3, 4)                  # x (B=2, S=3, E=4), contiguous
    a = x_offsets.transpose(0, 1).contiguous().view(6, 4)               # rows in (S, B) order
    offset, steps, perm = layout.rows_in_storage_order(a)
    assert (offset, steps) == (0, (4, 1))
    assert torch.equal(a[perm], torch.arange(24).view(6, 4))           # row q of the tile is x's q-th row
    assert layout.rows_in_storage_order(x_offsets[:, :1].expand(2, 3, 4).reshape(6, 4)) is None
    assert layout.rows_in_storage_order(a[:, [0, 2, 1, 3]]) is None    # not one step along K


@pytest.mark.slow
def test_the_projections_engine_variant_passes_the_judges_five_stages(saved):
    from autokernel.profile.regions import pick
    region = saved(problem_region("multihead_attention"))
    [verdict] = pick.judge_variants({"engine": engine_source(region)}, region)
    assert verdict.correctness == "PASS", verdict.message


def test_the_offsets_expression_is_a_vector_of_the_index_even_with_no_digits():
    assert layout.expression([], "r64", 1) == "r64 * 0"
    assert layout.expression([(1, 16, 1024), (16, 2, 512)], "r64", 32) == "(r64 % 16) * 1024 + (r64 // 16) * 512"
