"""Tests for autokernel/agents/axis_order.py: which kind each tunable is, and the order the search walks them."""

from pathlib import Path

import pytest

from autokernel.agents import axis_order
from autokernel.agents.tunables import read_tunables
from autokernel.core.contracts import BenchResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, kind", [
    ("ELEMS_PER_THREAD", "vectorisation"), ("VEC_WIDTH", "vectorisation"),
    ("MAX_BLOCK_N", "contiguous block"), ("MAX_BLOCK_V", "contiguous block"), ("TILE_ELEMS", "contiguous block"),
    ("STRIDED_BLOCK_INNER", "contiguous block"), ("EPILOGUE_BLOCK_N", "contiguous block"),
    ("dw_BLOCK_W", "contiguous block"), ("dw_BLOCK_H", "tile"), ("dw_num_warps", "warps"),
    ("num_warps", "warps"), ("MAX_NUM_WARPS", "warps"), ("large_warps", "warps"),
    ("BLOCK_M", "tile"), ("large_BLOCK_N", "tile"), ("SMALL_BLOCK_K", "tile"),
    ("num_stages", "stages"), ("mid_stages", "stages"), ("split_k_max", "split-K"), ("GROUP_M", "swizzle"),
    ("fp32_highest", "other"), ("large_min_seq", "other"), ("HEADS_PER_PROGRAM", "other"),
    ("plan", "plan"), ("engine_plan", "plan"), ("gate_up_plan", "plan"), ("gate_up", "plan"),
    ("warp_specialize", "plan"), ("variant", "plan"), ("engine_split_k", "split-K"), ("engine_16bit", "other"),
])
def test_each_tunable_is_classified_by_its_name(name, kind):
    assert axis_order.kind_of(name) == kind


def test_every_kind_has_a_place_in_both_orders():
    kinds = {kind for kind, _ in axis_order.AXIS_KINDS} | {"other"}
    assert all(set(order) == kinds for order in axis_order.KIND_ORDER.values())


@pytest.mark.parametrize("tile, names, warps", [
    ("large_BLOCK_N", ["large_BLOCK_N", "large_warps", "small_warps", "num_warps"], "large_warps"),
    ("BLOCK_N", ["BLOCK_N", "num_warps", "small_num_warps"], "num_warps"),
    ("SMALL_BLOCK_M", ["SMALL_BLOCK_M", "num_warps", "small_num_warps"], "small_num_warps"),
    ("BLOCK_M", ["BLOCK_M", "MAX_NUM_WARPS"], None),           # a cap on warps, not the tile's warps
    ("EPILOGUE_BLOCK_N", ["EPILOGUE_BLOCK_N", "num_warps"], None),   # a contiguous block, not a tile side
    ("large_BLOCK_N", ["large_BLOCK_N", "num_warps"], None),   # no warps of its own bucket
])
def test_a_tile_side_is_paired_with_its_own_buckets_warps(tile, names, warps):
    assert axis_order.paired_warps(tile, names) == warps


def test_the_bound_comes_from_the_first_passing_result_with_a_summary():
    failed = BenchResult("FAIL", limits={"bound": "compute"})
    on_cpu = BenchResult("PASS", limits={"gpu": None, "bound": None})
    on_gpu = BenchResult("PASS", limits={"gpu": "NVIDIA H100 SXM", "bound": "memory"})
    assert axis_order.bound_of([None, failed, on_cpu, on_gpu]) == "memory"
    assert axis_order.bound_of([on_cpu, BenchResult("PASS")]) is None


def test_the_buckets_a_job_does_not_use_are_their_siblings_with_the_same_parameters():
    names = list(read_tunables((ROOT / "kernels" / "matmul.py").read_text())[1])
    idle = axis_order.idle_bucket_axes(names, ["large", "small"])
    assert sorted({name.split("_")[0] for name in idle}) == ["ieee", "mid", "tc32"] and len(idle) == 15
    assert "split_k_max" not in idle, "split_k_* share a prefix but are not a bucket"
    assert axis_order.idle_bucket_axes(names, []) == []


@pytest.mark.parametrize("shape, dtype, bucket", [
    ({"M": 4096, "N": 4096, "K": 4096}, "float16", "engine"),     # 16-byte rows: the GEMM engine
    ({"M": 512, "N": 4096, "K": 4096}, "bfloat16", "engine"),
    ({"M": 512, "N": 50257, "K": 768}, "float16", "large"),       # rows TMA cannot read: the pointer tiles
    ({"M": 4096, "N": 4096, "K": 4096}, "float32", "tc32"),       # PyTorch's default setting: tf32x3, K-major
])
def test_the_matmul_starters_plan_names_the_bucket_of_each_shape(shape, dtype, bucket):
    tunables = read_tunables((ROOT / "kernels" / "matmul.py").read_text())[0]
    assert axis_order.buckets_used("matmul", tunables, [shape], dtype) == [bucket]


def test_the_plan_uses_the_tunables_under_search_not_the_starters():
    tunables = read_tunables((ROOT / "kernels" / "matmul.py").read_text())[0]
    shape = {"M": 512, "N": 4096, "K": 4096}
    # Off the engine, and with the mid bucket's tiles as large as the large bucket's, the plan keeps the first
    # (large) on the tie.
    same_as_large = {**tunables, "engine_16bit": False, "mid_BLOCK_N": tunables["large_BLOCK_N"]}
    assert axis_order.buckets_used("matmul", same_as_large, [shape], "float16") == ["large"]


def test_kernels_not_planned_by_bucket_have_no_bucket_preference(caplog):
    assert axis_order.buckets_used("softmax", {}, [{"M": 4, "N": 8}], "float16") is None
    assert axis_order.buckets_used("matmul", {}, [], "float16") is None
    assert axis_order.buckets_used("matmul", {}, [{"M": 8, "N": 8, "K": 8}], "float16") is None   # TUNABLES missing
    assert "no shape-bucket preference for matmul: KeyError" in caplog.text


def test_the_engine_starters_plan_per_shape_without_buckets(caplog):
    shapes = [{"M": 4096, "N": 2048, "K": 2048}, {"M": 4096, "N": 32000, "K": 2048}]
    tunables = read_tunables((ROOT / "kernels" / "rmsnorm_linear.py").read_text())[0]
    assert axis_order.buckets_used("rmsnorm_linear", tunables, shapes, "float16") is None
    mlp = read_tunables((ROOT / "kernels" / "rmsnorm_mlp.py").read_text())[0]
    assert axis_order.buckets_used("rmsnorm_mlp", mlp, [{"M": 4096, "D": 2048, "F": 5632, "act": "silu"}],
                                   "float16") is None
    assert "no shape-bucket preference" not in caplog.text


def test_a_job_on_the_engine_leaves_every_bucket_family_idle():
    names = list(read_tunables((ROOT / "kernels" / "matmul.py").read_text())[1])
    idle = axis_order.idle_bucket_axes(names, ["engine"])
    assert {name.split("_")[0] for name in idle} == {"large", "mid", "small", "ieee", "tc32"} and len(idle) == 25
    assert not any(name.startswith("engine_") for name in idle)
    declared = axis_order.declared_buckets("matmul")
    assert declared["engine"] == ["engine_"] and "split_k_" in declared["large"]
    order = axis_order.axis_order(names, "compute", ["engine"], declared)
    assert order[:5] == ["engine_plan", "engine_warp_specialize", "engine_group_m", "engine_split_k", "engine_16bit"]
    assert set(order[5:]) == set(axis_order.idle_bucket_axes(names, ["engine"], declared))      # the rest: idle
    assert "engine_plan" in axis_order.idle_bucket_axes(names, ["mid"], declared)
