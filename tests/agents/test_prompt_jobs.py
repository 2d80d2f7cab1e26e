"""The prompt built from a job extract really wrote (models/llama.py, tiny, profiled on CPU), not a hand-built dict:
per-shape speedups against PyTorch's best, and what limits the kernel at the job's shapes."""

import os
from dataclasses import replace

import pytest
import torch

from autokernel.agents.base import AgentContext
from autokernel.agents.prompt import build_messages
from autokernel.core import hardware
from autokernel.core.contracts import BenchResult
from autokernel.judge import limits
from autokernel.kernel_types import registry

H100 = hardware.Platform(hardware.lookup("NVIDIA H100 80GB HBM3"), triton="3.6.0", cuda="13.0", torch="2.11.0")
PASS = BenchResult("PASS", throughput=1234.5678, throughput_unit="GB/s", latency_us=81.0, pct_peak=37.5, bound="memory",
                   speedup_vs_pytorch=1.42, timings_meaningful=True)
FAIL = BenchResult("FAIL", failed_stage="edge shapes", message="wrong")


@pytest.fixture(scope="module")
def extracted_job(tmp_path_factory) -> dict:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel.core.paths import ROOT
    from autokernel.profile import jobs as kernel_jobs, models, profiler

    workspace = tmp_path_factory.mktemp("workspace")
    loaded = models.load_model(ROOT / "models" / "llama.py", input_shape=(1, 8), device="cpu",
                               model_kwargs={"config": "tiny", "n_layers": 1, "vocab_size": 128})
    profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=workspace,
                                  warmup=0, iters=1)
    # As the loop hands it to the agent: the Job's JSON (its baseline, once it is measured, goes apart).
    return kernel_jobs.extract_jobs(workspace / profiler.PLAN_FILE, 1, workspace)[0].to_json()


def context(job: dict, last_result: BenchResult, platform=H100, best_versions=()) -> AgentContext:
    return AgentContext(kernel_type=job["kernel_type"], kernel_source="KERNEL_TYPE = 'x'\n", last_result=last_result,
                        history=[], best_versions=list(best_versions), program="PLAYBOOK", job=job, platform=platform)


def _judged(job: dict, gpu, latency_us: float, compiled: list[dict]) -> BenchResult:
    """A passing bench result for the job's first shape, its `limits` made as bench.py makes them."""
    shape = job["shapes"][0]
    summary = limits.summarize(registry.get(job["kernel_type"]), getattr(torch, job["dtype"]), gpu,
                               [(shape, latency_us)], compiled, tf32=False)
    return replace(PASS, dtype=job["dtype"], timing_shapes=[registry.format_shape(shape)], compiled=compiled,
                   timings=[{"shape": registry.format_shape(shape), "latency_us": latency_us,
                             "pytorch_latency_us": 2 * latency_us, "compile_latency_us": None}],
                   limits=summary.to_json(), timings_meaningful=gpu.is_gpu)


def test_the_prompt_carries_the_gpu_its_peaks_and_the_per_shape_speedups(extracted_job):
    job = extracted_job
    shape = job["shape_args"][0]
    timed = replace(PASS, timings=[{"shape": shape, "latency_us": 40.0, "pytorch_latency_us": 60.0,
                                    "compile_latency_us": 50.0}])
    messages = build_messages(context(job, timed))
    assert "Peaks: fp16 989.4 TFLOP/s" in messages.job and "memory 3350 GB/s" in messages.job
    assert f"| {shape} | 40 | 60 | 50 | 1.25x |" in messages.turn      # against the faster of eager and compile
    assert f"Model: {job['model']}, dtype {job['dtype']}" in messages.job


def test_the_prompt_says_what_limits_the_kernel_at_the_jobs_shape(extracted_job):
    job = extracted_job
    kt = registry.get(job["kernel_type"])
    shape = job["shapes"][0]
    moved = kt.bytes_moved(shape, 2 if job["dtype"] in ("float16", "bfloat16") else 4)
    latency_us = moved / (0.25 * 3350e9) * 1e6            # a quarter of the H100's bandwidth
    stand_in = [{"kernel": "_stand_in_kernel", "registers": 255, "spills": 12, "shared_bytes": 0, "num_warps": 8,
                 "num_stages": 1}]                      # the interpreter compiles nothing: the figures a GPU reports
    turn = build_messages(context(job, _judged(job, H100.gpu, latency_us, stand_in))).turn
    section = turn[turn.index("## What limits the kernel (the last experiment)"):]
    section = section[:section.index("\n## ")]
    assert f"- {registry.format_shape(shape)} (measured): " in section
    assert "= 25% of peak bandwidth" in section
    bound = "memory" if kt.flops(shape) / moved < 66.9e12 / 3350e9 else "compute"
    assert f"{bound}-bound" in section
    assert ("- _stand_in_kernel (theoretical occupancy): 256 threads/block, 1 blocks/SM, 8 warps = 12.5% occupancy, "
            "limited by registers") in section


def test_under_the_interpreter_the_prompt_says_there_are_no_gpu_figures(extracted_job):
    cpu = hardware.Platform(hardware.CPU_INTERPRETER, triton="3.9.0", cuda=None, torch="2.13.0")
    result = _judged(extracted_job, hardware.CPU_INTERPRETER, 1234.0, [])
    turn = build_messages(context(extracted_job, result, platform=cpu)).turn
    assert "what limits this kernel: no GPU figures: the kernel ran in Triton's CPU interpreter" in turn
    assert "GB/s =" not in turn.split("## What limits the kernel")[1].split("\n## ")[0]


def test_the_limits_of_the_best_kept_version_stand_in_for_a_failed_experiment():
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [{"M": 4096, "N": 8192}], "dtype": "float16"}
    best = _judged(job, H100.gpu, 100.0, [])
    turn = build_messages(context(job, FAIL, best_versions=[("KERNEL_TYPE = 'x'\n", best)])).turn
    assert "## What limits the kernel (the latest passing version)" in turn and "M=4096,N=8192 (measured)" in turn
