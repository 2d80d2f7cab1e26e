"""Tests for autokernel/judge/limits.py: achieved figures, roofline bound and theoretical occupancy, against hand-worked
numbers."""

import pytest
import torch

from autokernel.core import hardware
from autokernel.judge import limits
from autokernel.kernel_types import registry

H100 = hardware.lookup("NVIDIA H100 80GB HBM3")
A100 = hardware.lookup("NVIDIA A100-SXM4-80GB")
A10 = hardware.lookup("NVIDIA A10")


def occupancy(gpu, **figures):
    return limits.occupancy_of({"kernel": "k", **figures}, gpu.sm_limits)


def test_255_registers_and_256_threads_fit_one_block_on_an_h100_bound_by_registers():
    # 255 x 32 = 8160 registers a warp, allocated as 8192; 65536 / 8192 = 8 warps = one 8-warp block.
    o = occupancy(H100, registers=255, num_warps=8, shared_bytes=0, spills=0)
    assert o.blocks_per_sm == 1 and o.limited_by == ["registers"]
    assert o.warps_per_sm == 8 and o.occupancy_pct == pytest.approx(12.5)
    assert o.blocks_by == {"registers": 1, "shared memory": 228, "warps": 8, "blocks": 32}


def test_shared_memory_binds_with_the_systems_reserve_per_block():
    # (100 KiB + 1 KiB reserved) per block: 228 KiB holds 2 of them; registers would allow 16, warps 16.
    o = occupancy(H100, registers=32, num_warps=4, shared_bytes=100 * 1024)
    assert o.blocks_per_sm == 2 and o.limited_by == ["shared memory"] and o.occupancy_pct == pytest.approx(12.5)
    # On an A100 (164 KiB) only one fits.
    assert occupancy(A100, registers=32, num_warps=4, shared_bytes=100 * 1024).blocks_per_sm == 1


def test_ties_name_every_binding_limit_and_an_ampere_consumer_part_has_fewer_warps():
    # 64 registers x 16 warps on an A100: 2048 a warp, 32 warps by registers = 2 blocks; warps alone allow 4.
    o = occupancy(A100, registers=64, num_warps=16, shared_bytes=0)
    assert (o.blocks_per_sm, o.limited_by, o.occupancy_pct) == (2, ["registers"], 50.0)
    # One-warp blocks on an A10 (compute capability 8.6): 16 resident blocks at most, of 48 warps.
    o = occupancy(A10, registers=32, num_warps=1, shared_bytes=0)
    assert (o.blocks_per_sm, o.limited_by) == (16, ["blocks"]) and o.occupancy_pct == pytest.approx(100 * 16 / 48)
    # 128 registers x 8 warps on an H100: 4096 a warp, 16 warps = 2 blocks by registers; warps alone allow 8.
    o = occupancy(H100, registers=128, num_warps=8, shared_bytes=0)
    assert (o.blocks_per_sm, o.limited_by) == (2, ["registers"])
    # 32 registers x 32 warps: registers allow 64 warps = 2 blocks, and so do the 64 resident warps.
    o = occupancy(H100, registers=32, num_warps=32, shared_bytes=0)
    assert (o.blocks_per_sm, o.limited_by) == (2, ["registers", "warps"])


def test_a_kernel_without_a_warp_count_has_no_occupancy_and_one_too_big_fits_nowhere():
    assert occupancy(H100, registers=40) is None
    o = occupancy(H100, registers=32, num_warps=4, shared_bytes=300 * 1024)
    assert o.blocks_per_sm == 0 and o.occupancy_pct == 0.0
    assert "no block fits on an SM" in "\n".join(limits.describe(
        limits.Limits("H100", "n", occupancy=[o]).to_json()))


def test_a_memory_bound_softmax_reports_bandwidth_and_its_headroom():
    kt = registry.get("softmax")
    shape = {"M": 4096, "N": 8192}
    moved = 2 * 4096 * 8192 * 2                       # read and write, float16
    latency_us = moved / (1675e9) * 1e6                # exactly half of the H100's 3350 GB/s
    s = limits.shape_limits(kt, shape, torch.float16, latency_us, H100, tf32=False)
    assert s.achieved_gbs == pytest.approx(1675) and s.pct_bandwidth == pytest.approx(50)
    assert s.compute_peak == "fp32", "softmax computes on the float32 lanes, not the tensor cores"
    assert s.intensity == pytest.approx(5 / 4) and s.ridge == pytest.approx(66.9e12 / 3350e9)
    assert s.bound == "memory" and s.headroom == pytest.approx(2.0)


@pytest.mark.parametrize("dtype, tf32, peak_name, peak", [
    (torch.float16, False, "fp16 tensor", 989.4), (torch.bfloat16, False, "bf16 tensor", 989.4),
    (torch.float32, True, "tf32 tensor", 494.7), (torch.float32, False, "fp32", 66.9)])
def test_a_large_matmul_is_compute_bound_against_the_peak_its_dtype_runs_at(dtype, tf32, peak_name, peak):
    kt = registry.get("matmul")
    shape = {"M": 4096, "N": 4096, "K": 4096}
    latency_us = 2 * 4096**3 / (peak * 0.25e12) * 1e6      # a quarter of the peak
    s = limits.shape_limits(kt, shape, dtype, latency_us, H100, tf32=tf32)
    assert (s.compute_peak, s.bound) == (peak_name, "compute")
    assert s.pct_compute == pytest.approx(25) and s.headroom == pytest.approx(4)


def test_the_summary_takes_the_bound_of_the_slowest_shape_and_labels_what_it_measured():
    kt = registry.get("matmul")
    decode, prefill = {"M": 1, "N": 4096, "K": 4096}, {"M": 4096, "N": 4096, "K": 4096}
    summary = limits.summarize(kt, torch.float16, H100, [(decode, 20.0), (prefill, 400.0)],
                               [{"kernel": "_matmul_kernel", "registers": 168, "num_warps": 8, "shared_bytes": 131072,
                                 "num_stages": 3, "spills": 0}], tf32=False)
    assert [s.bound for s in summary.shapes] == ["memory", "compute"] and summary.bound == "compute"
    text = "\n".join(limits.describe(summary.to_json()))
    assert "M=1,N=4096,K=4096 (measured)" in text and "memory-bound" in text and "compute-bound" in text
    assert "_matmul_kernel (theoretical occupancy): 256 threads/block, 1 blocks/SM" in text
    assert "limited by registers and shared memory" in text


def test_without_a_gpu_the_summary_says_so_and_carries_no_numbers():
    summary = limits.summarize(registry.get("softmax"), torch.float16, hardware.CPU_INTERPRETER,
                               [({"M": 4, "N": 8}, 1234.0)], [], tf32=False)
    assert summary.gpu is None and summary.shapes == [] and summary.occupancy == []
    assert limits.describe(summary.to_json()) == [f"what limits this kernel: {limits.NO_GPU_NOTE}"]


def test_a_gpu_without_per_sm_limits_gets_no_occupancy_and_says_why():
    mi300 = hardware.lookup("AMD Instinct MI300X")
    summary = limits.summarize(registry.get("softmax"), torch.float16, mi300, [({"M": 4096, "N": 4096}, 50.0)],
                               [{"kernel": "k", "num_warps": 4}], tf32=False)
    assert summary.occupancy == [] and "no per-multiprocessor limits known" in summary.occupancy_note


def test_the_registry_says_which_types_run_on_tensor_cores():
    matrix = {name for name, kt in registry.REGISTRY.items() if kt.matrix}
    assert matrix == {"matmul", "fused_mlp", "flash_attention", "rmsnorm_linear", "rmsnorm_mlp"}


def test_a_shape_timed_at_zero_has_no_rate_and_does_not_break_the_summary():
    summary = limits.summarize(registry.get("softmax"), torch.float16, H100,
                               [({"M": 8, "N": 8}, 0.0), ({"M": 4096, "N": 4096}, 50.0)], [], tf32=False)
    assert [s.shape for s in summary.shapes] == ["M=4096,N=4096"]
