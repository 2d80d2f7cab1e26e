"""A depthwise convolution region's other starter: the direct kernel (autokernel/profile/regions/depthwise_variant.py),
checked in Triton's interpreter against the region's reference with the judge's own tolerance."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.agents.tunables import read_tunables  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.profile.regions import depthwise_variant, jobs, pick, starter  # noqa: E402
from tests.regions.starters import judged_again  # noqa: E402
from tests.regions.test_gemm_variant import check, only_region, problem_region  # noqa: E402

CPU = torch.device("cpu")


def direct_source(region) -> str:
    made = depthwise_variant.variant(region, CPU)
    assert made is not None
    return starter.write(region, {depthwise_variant.VARIANT: made}, generated_on="cpu", versions="test")


CONVOLUTIONS = {     # (module, input shape): each a depthwise convolution the direct kernel computes
    "3x3": (nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), (2, 4, 9, 7)),
    "5x5 stride 2 bias": (nn.Conv2d(3, 3, 5, stride=2, padding=2, groups=3), (1, 3, 11, 10)),
    "dilated, no padding": (nn.Conv2d(2, 2, 3, dilation=2, groups=2), (2, 2, 9, 9)),
    "channel multiplier 2, 3x1": (nn.Conv2d(3, 6, (3, 1), padding=(1, 0), groups=3), (1, 3, 6, 5)),
    "asymmetric stride and padding": (nn.Conv2d(4, 4, (2, 3), stride=(1, 2), padding=(0, 1), groups=4), (1, 4, 5, 8)),
}


@pytest.mark.parametrize("name", list(CONVOLUTIONS))
def test_a_depthwise_convolution_runs_on_the_direct_kernel(name, tmp_path):
    module, shape = CONVOLUTIONS[name]
    torch.manual_seed(0)
    region = only_region(module.eval(), torch.randn(shape))
    source = direct_source(region)
    check(source, region, tmp_path, {})
    # tiles smaller than the plane (several programs a plane, masked edges), and one row a program
    check(source, region, tmp_path, {"dw_BLOCK_H": 2, "dw_BLOCK_W": 16})
    check(source, region, tmp_path, {"dw_BLOCK_H": 1, "dw_BLOCK_W": 16, "dw_num_warps": 1})


def test_the_problems_region_takes_a_tile_as_wide_as_its_rows(tmp_path):
    region = problem_region("depthwise_conv2d")          # 2x4x8x8 at CPU sizes
    made = depthwise_variant.variant(region, CPU)
    assert made.tunables == {"dw_BLOCK_H": 8, "dw_BLOCK_W": 16, "dw_num_warps": 4}
    full = depthwise_variant.plan(depthwise_variant.Geometry(
        x="x", weight="weight", bias=None, n=16, c=64, h=128, w=128, out_channels=64, oh=128, ow=128, kh=3, kw=3,
        stride=(1, 1), padding=(1, 1), dilation=(1, 1), x_strides=(1 << 20, 1 << 14, 128, 1), w_strides=(9, 9, 3, 1),
        b_stride=0, dtype="float32"))
    assert full == {"dw_BLOCK_H": 8, "dw_BLOCK_W": 128, "dw_num_warps": 4}     # the H200's best of 7 tiles there
    check(direct_source(region), region, tmp_path, {})


@pytest.mark.parametrize("module, shape, why", [
    (nn.Conv2d(4, 4, 3, padding=1), (1, 4, 6, 6), "an ordinary convolution"),
    (nn.Conv2d(4, 4, 3, padding=1, groups=2), (1, 4, 6, 6), "two channels a group"),
    (nn.ConvTranspose2d(4, 4, 3, groups=4), (1, 4, 6, 6), "transposed"),
    (nn.Conv1d(4, 4, 3, groups=4), (1, 4, 6), "one-dimensional"),
    (nn.Sequential(nn.Conv2d(4, 4, 3, groups=4), nn.ReLU()), (1, 4, 6, 6), "an epilogue after it"),
])
def test_other_convolutions_keep_inductors_starter_alone(module, shape, why):
    region = only_region(module.eval(), torch.randn(shape))
    assert depthwise_variant.read(region.definition) is None, why


class OneElementPadding(nn.Module):
    """F.conv2d's padding=[1]: ATen records [1] and means [1, 1]."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 1, 3, 3))

    def forward(self, x):
        return torch.nn.functional.conv2d(x, self.weight, groups=4, padding=[1], dilation=[1])


@pytest.mark.parametrize("module, x, why", [
    (OneElementPadding(), torch.randn(1, 4, 6, 6), "a one-element padding"),
    (nn.Conv2d(4, 4, 3, groups=4), torch.randn(1, 8, 6, 6)[:, ::2], "an input sliced in its channels"),
])
def test_what_the_kernel_does_not_read_as_written_keeps_inductors_starter(module, x, why, tmp_path, monkeypatch):
    region = only_region(module.eval(), x)
    assert depthwise_variant.read(region.definition) is None, why
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    store.save(region, tmp_path)
    assert "depthwise" not in read_tunables(jobs.starter_source(region.name, CPU, judged=False))[1].get("variant", [])


def test_a_variant_of_ours_that_fails_to_write_leaves_the_region_inductors_starter(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    region = problem_region("depthwise_conv2d")
    store.save(region, tmp_path)

    def broken(g, name):
        raise ValueError("not enough values to unpack")
    monkeypatch.setattr(depthwise_variant, "_kernel", broken)
    said = []
    source = jobs.starter_source(region.name, CPU, judged=True, log=said.append)
    assert "TUNABLES['variant']" not in source and "def depthwise_plane" not in source
    assert any("our depthwise variant could not be written (ValueError" in line for line in said), said
    check(source, region, tmp_path, {})


def test_channels_last_input_keeps_inductors_starter_and_says_why():
    """cuDNN's channels_last depthwise kernel was 2.5-4x faster than ours on the H200: not offered there."""
    x = torch.randn(1, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    region = only_region(nn.Conv2d(4, 4, 3, padding=1, groups=4).eval(), x)
    said = []
    assert depthwise_variant.variant(region, CPU, said.append) is None
    assert said and "a contiguous input and weight" in said[0]


def test_a_depthwise_regions_starter_holds_inductors_code_and_ours_and_the_judge_orders_them(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    region = problem_region("depthwise_conv2d")
    store.save(region, tmp_path)
    source = jobs.starter_source(region.name, CPU, judged=False)     # unjudged: Inductor's stays first
    tunables, choices = read_tunables(source)
    assert tunables["variant"] == "inductor" and choices["variant"] == ["inductor", "depthwise"]
    for variant in choices["variant"]:
        check(source, region, tmp_path, {"variant": variant})
    source = judged_again(region, "depthwise", 70.0, 15900.0, monkeypatch)    # ours 200x faster, as on the H200
    assert read_tunables(source)[0]["variant"] == "depthwise"
    check(source, region, tmp_path, {})


@pytest.mark.slow
def test_the_direct_variant_passes_the_judges_five_stages(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    region = problem_region("depthwise_conv2d")
    store.save(region, tmp_path)
    [verdict] = pick.judge_variants({"depthwise": direct_source(region)}, region)
    assert verdict.correctness == "PASS", verdict.message
