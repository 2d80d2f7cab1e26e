"""The GPU database finds known GPUs by name and estimates unknown ones."""

import pytest
import torch

from autokernel.core import hardware


@pytest.mark.parametrize("device_name, expected", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H200", "NVIDIA H200"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB"),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA L40S", "NVIDIA L40S"),
    ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA A10", "NVIDIA A10"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4080"),
    ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
    ("NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("AMD Instinct MI325X", "AMD Instinct MI325X"),
    ("AMD Instinct MI350X", "AMD Instinct MI350X"),
    ("AMD Instinct MI355X", "AMD Instinct MI355X"),
])
def test_lookup_by_device_name(device_name, expected):
    spec = hardware.lookup(device_name)
    assert spec is not None and spec.name == expected
    assert spec.fp16_tflops > spec.fp32_tflops > 0 and spec.mem_bandwidth_gbs > 0


def test_unknown_gpu_is_estimated_from_sm_count_and_clock():
    # An H100 SXM by its numbers: 132 SMs at 1.83 GHz, compute capability 9.0.
    spec = hardware.estimate("Mystery GPU", 132, 1.83, (9, 0), bandwidth_gbs=3350.0)
    assert spec.estimated
    assert spec.fp16_tflops == pytest.approx(989, rel=0.01)
    assert spec.fp32_tflops == pytest.approx(61.8, rel=0.01)
    assert hardware.lookup("Mystery GPU") is None


def test_ridge_point_and_peaks():
    h100 = hardware.lookup("NVIDIA H100 80GB HBM3")
    assert h100.ridge_point(torch.float16) == pytest.approx(989.4e12 / 3350e9)
    assert h100.peak_tflops(torch.float32) == 66.9
    assert hardware.CPU_INTERPRETER.ridge_point(torch.float16) is None


def test_detect_without_gpu_reports_the_interpreter():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert hardware.detect() is hardware.CPU_INTERPRETER
