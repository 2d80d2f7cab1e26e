"""The GPU database: peak arithmetic rates and memory bandwidth, and detection of the GPU in use.

Figures are dense (no structured sparsity) datasheet peaks: half-precision rates are tensor-core
rates with float32 accumulation, float32 is the plain (non-tensor-core) rate. They are ceilings
for "% of peak", not promises: measured copy bandwidth and cuBLAS are the practical limits
(benchmarks/compare.py measures both). A GPU that is not listed gets an estimate from its
multiprocessor count, clock and compute capability, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GPUSpec:
    name: str
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp32_tflops: float | None
    mem_bandwidth_gbs: float | None
    vendor: str = "NVIDIA"
    estimated: bool = False

    def peak_tflops(self, dtype: torch.dtype) -> float | None:
        return {torch.float16: self.fp16_tflops, torch.bfloat16: self.bf16_tflops}.get(dtype, self.fp32_tflops)

    def ridge_point(self, dtype: torch.dtype) -> float | None:
        """FLOP per byte above which a kernel is compute-bound on this GPU."""
        tflops = self.peak_tflops(dtype)
        if tflops is None or not self.mem_bandwidth_gbs:
            return None
        return tflops * 1e12 / (self.mem_bandwidth_gbs * 1e9)

    @property
    def is_gpu(self) -> bool:
        return self.mem_bandwidth_gbs is not None


def _gpu(name, fp16, fp32, bandwidth, bf16=None, vendor="NVIDIA"):
    return GPUSpec(name, fp16, fp16 if bf16 is None else bf16, fp32, bandwidth, vendor)


# Matched against torch.cuda.get_device_name() in order, so more specific names come first.
GPUS: list[tuple[tuple[str, ...], GPUSpec]] = [
    (("H100", "PCIE"), _gpu("NVIDIA H100 PCIe", 756.0, 51.2, 2000.0)),
    (("H100", "NVL"), _gpu("NVIDIA H100 NVL", 835.0, 60.0, 3900.0)),
    (("H100",), _gpu("NVIDIA H100 SXM", 989.4, 66.9, 3350.0)),
    (("H200",), _gpu("NVIDIA H200", 989.4, 66.9, 4800.0)),
    (("A100", "40GB"), _gpu("NVIDIA A100 40GB", 312.0, 19.5, 1555.0)),
    (("A100",), _gpu("NVIDIA A100 80GB", 312.0, 19.5, 2039.0)),
    (("L40S",), _gpu("NVIDIA L40S", 362.1, 91.6, 864.0)),
    (("L4",), _gpu("NVIDIA L4", 121.0, 30.3, 300.0)),
    (("A10G",), _gpu("NVIDIA A10G", 70.0, 31.2, 600.0)),
    (("A10",), _gpu("NVIDIA A10", 125.0, 31.2, 600.0)),
    (("4090",), _gpu("NVIDIA GeForce RTX 4090", 165.2, 82.6, 1008.0)),
    (("4080",), _gpu("NVIDIA GeForce RTX 4080", 97.5, 48.7, 716.8)),
    (("3090",), _gpu("NVIDIA GeForce RTX 3090", 71.0, 35.6, 936.0)),
    (("3080",), _gpu("NVIDIA GeForce RTX 3080", 59.5, 29.8, 760.0)),
    (("MI300X",), _gpu("AMD Instinct MI300X", 1307.4, 163.4, 5300.0, vendor="AMD")),
    (("MI325X",), _gpu("AMD Instinct MI325X", 1307.4, 163.4, 6000.0, vendor="AMD")),
    (("MI350X",), _gpu("AMD Instinct MI350X", 2307.0, 144.2, 8000.0, vendor="AMD")),
    (("MI355X",), _gpu("AMD Instinct MI355X", 2516.6, 157.3, 8000.0, vendor="AMD")),
]

CPU_INTERPRETER = GPUSpec("CPU (Triton interpreter)", None, None, None, None, vendor="none")

# Per multiprocessor and clock, by compute capability: dense fp16 tensor-core FLOPs with float32
# accumulation, and plain float32 lanes (each does one FMA = 2 FLOPs).
_TENSOR_FLOPS_PER_SM_CLOCK = {(7, 0): 1024, (7, 5): 512, (8, 0): 2048, (8, 6): 512, (8, 7): 512, (8, 9): 512,
                              (9, 0): 4096, (10, 0): 8192, (12, 0): 1024}
_FP32_LANES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64}
_DEFAULT_FP32_LANES = 128


def lookup(device_name: str) -> GPUSpec | None:
    upper = device_name.upper()
    for keys, spec in GPUS:
        if all(key in upper for key in keys):
            return spec
    return None


def estimate(name: str, sm_count: int, clock_ghz: float, capability: tuple[int, int],
             bandwidth_gbs: float | None = None) -> GPUSpec:
    """Peak figures for an unlisted NVIDIA GPU from its multiprocessor count, clock and compute capability."""
    tensor = _TENSOR_FLOPS_PER_SM_CLOCK.get(capability, 1024)
    lanes = _FP32_LANES_PER_SM.get(capability, _DEFAULT_FP32_LANES)
    fp16 = sm_count * tensor * clock_ghz / 1e3
    fp32 = sm_count * lanes * 2 * clock_ghz / 1e3
    bf16 = fp16 if capability >= (8, 0) else None
    # Without a bus width to go on, assume a mid-range HBM/GDDR part; the flag tells readers it is a guess.
    return GPUSpec(name, fp16, bf16, fp32, bandwidth_gbs or 1000.0, estimated=True)


def detect(device_index: int | None = None) -> GPUSpec:
    """The spec of the GPU torch sees, or CPU_INTERPRETER when there is none."""
    if not torch.cuda.is_available():
        return CPU_INTERPRETER
    index = torch.cuda.current_device() if device_index is None else device_index
    name = torch.cuda.get_device_name(index)
    known = lookup(name)
    if known is not None:
        return known
    props = torch.cuda.get_device_properties(index)
    clock_khz = getattr(props, "clock_rate", 0) or 1_500_000
    bus_bits = getattr(props, "memory_bus_width", 0)
    mem_khz = getattr(props, "memory_clock_rate", 0)
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9 if bus_bits and mem_khz else None
    return estimate(name, props.multi_processor_count, clock_khz / 1e6, (props.major, props.minor), bandwidth)
