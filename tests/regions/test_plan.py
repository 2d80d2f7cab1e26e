"""Regions in the plan: ranked beside the menu's types, showing their source lines, taking the menu ops they hold;
extracted as jobs whose starter is Inductor's code."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.core.contracts import PlanEntry  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.kernel_types.regions.record import RegionEntry  # noqa: E402
from autokernel.profile import jobs, profiler  # noqa: E402
from tests.regions import small_models as models  # noqa: E402


class Mixed(nn.Module):
    """A GEMM with a reducing epilogue (a region, taking the menu's matmul and sum), and a lone softmax (the menu's)."""

    def __init__(self):
        super().__init__()
        self.head = models.GemmSigmoidRowSum()

    def forward(self, x, scores):
        return self.head(x), torch.softmax(scores, dim=-1)


def plan_of(tmp_path):
    inputs = (models.rows(16, 32), models.rows(16, 64))
    _, plan = profiler.profile_to_workspace(Mixed(), inputs, name="Mixed", workspace=tmp_path, warmup=1, iters=2)
    return plan


def test_the_plan_holds_the_region_with_its_source_lines_and_leaves_the_menu_its_lone_op(tmp_path):
    plan = plan_of(tmp_path)
    entries = plan.entries
    types = [entry.kernel_type for entry in entries]
    regions = [entry for entry in entries if store.is_region(entry.kernel_type)]
    assert len(regions) == 1 and "softmax" in types
    assert "matmul" not in types and "reduce" not in types          # the region took the GEMM and the sum
    region = RegionEntry.from_json(regions[0].extra["region"])        # the plan file's entry, read back as a record
    assert region.ops == ["addmm", "sigmoid", "sum"] and "sigmoid" in region.sources[0] and region.instances == 1
    assert (tmp_path / "regions" / f"{regions[0].kernel_type}.json").is_file()
    assert sorted(entry.rank for entry in entries) == list(range(1, len(entries) + 1))
    assert regions[0].shapes == [{"weight": "48x32", "bias": 48, "x": "16x32"}]


def test_a_region_job_starts_from_inductors_code(tmp_path):
    plan_of(tmp_path)
    made = jobs.extract_jobs(tmp_path / profiler.PLAN_FILE, 5, tmp_path, log=lambda line: None)
    [job] = [job for job in made if store.is_region(job.kernel_type)]
    source = open(job.path).read()
    assert f'KERNEL_TYPE = "{job.kernel_type}"' in source and "JOB = {" in source and "@triton.jit" in source
    assert job.bench_args == ["--shape", "weight=48x32,bias=48,x=16x32", "--dtype", "float32"]
    assert any(j.kernel_type == "softmax" for j in made)


def test_a_region_without_a_starter_gives_the_menu_back_the_calls_it_took(tmp_path, monkeypatch):
    from autokernel.profile.regions import jobs as region_jobs
    from autokernel.profile.regions.starter_code import StarterError

    def no_starter(name, on=None, *, variants=False, log=None):
        raise StarterError("Inductor's code for it runs `extern_kernels.mm(...)`")

    plan_of(tmp_path)
    monkeypatch.setattr(region_jobs, "starter_source", no_starter)
    said = []
    made = jobs.extract_jobs(tmp_path / profiler.PLAN_FILE, 5, tmp_path, log=said.append)
    assert {job.kernel_type for job in made} == {"matmul", "reduce", "softmax"}
    matmul = next(job for job in made if job.kernel_type == "matmul")
    assert matmul.shapes == [{"M": 16, "N": 48, "K": 32}] and "KERNEL_TYPE" in open(matmul.path).read()
    assert any("no starter" in line and "matmul" in line for line in said)


def test_a_cnns_convolutions_and_pooling_are_planned_as_regions(tmp_path):
    """Nothing of a CNN is left unplanned: each convolution heads a region (its batch norm and ReLU with it), the
    pooling is in one, and each is timed."""
    model = nn.Sequential(models.ConvBnRelu(3, 4), models.MaxPool(), models.DepthwiseConv(4)).eval()
    _, plan = profiler.profile_to_workspace(model, (models.images(3, 8),), name="Cnn", workspace=tmp_path, warmup=1,
                                            iters=2)
    regions = [RegionEntry.from_json(entry.extra["region"]) for entry in plan.entries
               if store.is_region(entry.kernel_type)]
    ops = sorted(op for region in regions for op in region.ops)
    assert ops == ["convolution", "convolution", "max_pool2d_with_indices", "native_batch_norm", "relu"], ops
    assert all(entry.time_ms > 0 for entry in plan.entries)       # each region's time is measured, none is "other"
