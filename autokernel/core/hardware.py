"""The GPU database: peak arithmetic rates and memory bandwidth, and detection of the GPU in use.

Figures are dense (no structured sparsity) datasheet peaks: half-precision rates are tensor-core
rates with float32 accumulation, float32 is the plain (non-tensor-core) rate. They are ceilings
for "% of peak", not promises: measured copy bandwidth and cuBLAS are the practical limits
(benchmarks/kernels.py compare measures both). A GPU that is not listed gets an estimate from its
multiprocessor count, clock and compute capability, and says so.

Each NVIDIA record also names its compute capability, whose per-multiprocessor limits (registers,
shared memory, resident warps and blocks: SM_LIMITS) give a kernel's theoretical occupancy, and every
record its multiprocessor count (AMD: compute units) and L2 size: with a launch's grid they say how
many programs each multiprocessor gets. On a real device both come from the device itself.

`Platform` is the GPU and the software versions the kernels are compiled with (Triton, CUDA, torch):
what the LLM agent is told about the machine (autokernel/agents/facts.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    tf32_tflops: float | None = None        # dense TF32 tensor-core rate (float32 matrix products under TF32)
    capability: tuple[int, int] | None = None   # NVIDIA compute capability: the key of SM_LIMITS
    sm_count: int | None = None             # streaming multiprocessors (AMD: compute units)
    l2_bytes: int | None = None             # last-level cache in front of the memory (AMD: L2 of all dies)

    def peak_tflops(self, dtype: torch.dtype) -> float | None:
        return {torch.float16: self.fp16_tflops, torch.bfloat16: self.bf16_tflops}.get(dtype, self.fp32_tflops)

    def compute_peak(self, dtype: torch.dtype, *, matrix: bool, tf32: bool) -> tuple[str, float | None]:
        """(name, TFLOP/s) of the rate a kernel's arithmetic runs at: the tensor cores for matrix products
        (TF32 for float32 ones when PyTorch's float32 matmul setting allows it), else the plain float32
        lanes, which is where elementwise and reduction kernels compute, whatever their input dtype."""
        if matrix and dtype in (torch.float16, torch.bfloat16):
            return f"{'fp16' if dtype == torch.float16 else 'bf16'} tensor", self.peak_tflops(dtype)
        if matrix and dtype == torch.float32 and tf32 and self.tf32_tflops:
            return "tf32 tensor", self.tf32_tflops
        return "fp32", self.fp32_tflops

    @property
    def sm_limits(self) -> SMLimits | None:
        return SM_LIMITS.get(self.capability) if self.capability else None

    def ridge_point(self, dtype: torch.dtype) -> float | None:
        """FLOP per byte above which a kernel is compute-bound on this GPU."""
        tflops = self.peak_tflops(dtype)
        if tflops is None or not self.mem_bandwidth_gbs:
            return None
        return tflops * 1e12 / (self.mem_bandwidth_gbs * 1e9)

    @property
    def is_gpu(self) -> bool:
        return self.mem_bandwidth_gbs is not None


@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor can hold at once, for a compute capability."""
    max_warps: int                  # resident warps (threads / 32)
    max_blocks: int                 # resident thread blocks
    registers: int                  # 32-bit registers
    shared_bytes: int               # shared memory a kernel may use (the largest carveout)
    register_unit: int = 256        # registers are allocated per warp in units of this many
    shared_unit: int = 128          # shared memory is allocated per block in units of this many bytes
    shared_reserved: int = 1024     # bytes the system reserves per block (compute capability 8.0 and later)


# NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (maximum
# resident blocks and warps per SM, 32-bit registers per SM, maximum shared memory per SM, 1 KB
# reserved per block from 8.0 on), with the allocation granularities of NVIDIA's CUDA Occupancy
# Calculator; the A100 and H100 architecture whitepapers give the same 164 KB and 228 KB.
SM_LIMITS: dict[tuple[int, int], SMLimits] = {
    (7, 0): SMLimits(64, 32, 65536, 96 * 1024, shared_unit=256, shared_reserved=0),     # V100
    (7, 5): SMLimits(32, 16, 65536, 64 * 1024, shared_unit=256, shared_reserved=0),     # T4, RTX 20
    (8, 0): SMLimits(64, 32, 65536, 164 * 1024),        # A100
    (8, 6): SMLimits(48, 16, 65536, 100 * 1024),        # A10, A10G, RTX 30
    (8, 7): SMLimits(48, 16, 65536, 164 * 1024),        # Jetson Orin
    (8, 9): SMLimits(48, 24, 65536, 100 * 1024),        # L4, L40S, RTX 40
    (9, 0): SMLimits(64, 32, 65536, 228 * 1024),        # H100, H200
    (10, 0): SMLimits(64, 32, 65536, 228 * 1024),       # B200
}


def _gpu(name, fp16, fp32, bandwidth, capability=None, bf16=None, tf32=None, vendor="NVIDIA", *, sms, l2_mb):
    # NVIDIA's datasheets (A100, H100, H200, L40S, L4, A10, RTX 30/40) list the dense TF32 tensor rate
    # at half the dense FP16 one; AMD's MI300X/MI325X likewise (653.7 against 1307.4).
    if tf32 is None and (vendor == "NVIDIA" or name.endswith(("MI300X", "MI325X"))):
        tf32 = fp16 / 2
    return GPUSpec(name, fp16, fp16 if bf16 is None else bf16, fp32, bandwidth, vendor, tf32_tflops=tf32,
                   capability=capability, sm_count=sms, l2_bytes=l2_mb * 1024 * 1024)


# Matched against torch.cuda.get_device_name() in order, so more specific names come first.
GPUS: list[tuple[tuple[str, ...], GPUSpec]] = [
    (("H100", "PCIE"), _gpu("NVIDIA H100 PCIe", 756.0, 51.2, 2000.0, (9, 0), sms=114, l2_mb=50)),
    (("H100", "NVL"), _gpu("NVIDIA H100 NVL", 835.0, 60.0, 3900.0, (9, 0), sms=132, l2_mb=50)),
    (("H100",), _gpu("NVIDIA H100 SXM", 989.4, 66.9, 3350.0, (9, 0), sms=132, l2_mb=50)),
    (("H200",), _gpu("NVIDIA H200", 989.4, 66.9, 4800.0, (9, 0), sms=132, l2_mb=50)),
    (("A100", "40GB"), _gpu("NVIDIA A100 40GB", 312.0, 19.5, 1555.0, (8, 0), sms=108, l2_mb=40)),
    (("A100",), _gpu("NVIDIA A100 80GB", 312.0, 19.5, 2039.0, (8, 0), sms=108, l2_mb=40)),
    (("L40S",), _gpu("NVIDIA L40S", 362.1, 91.6, 864.0, (8, 9), sms=142, l2_mb=96)),
    (("L4",), _gpu("NVIDIA L4", 121.0, 30.3, 300.0, (8, 9), sms=58, l2_mb=48)),
    (("A10G",), _gpu("NVIDIA A10G", 70.0, 31.2, 600.0, (8, 6), sms=80, l2_mb=6)),
    (("A10",), _gpu("NVIDIA A10", 125.0, 31.2, 600.0, (8, 6), sms=72, l2_mb=6)),
    (("4090",), _gpu("NVIDIA GeForce RTX 4090", 165.2, 82.6, 1008.0, (8, 9), sms=128, l2_mb=72)),
    (("4080",), _gpu("NVIDIA GeForce RTX 4080", 97.5, 48.7, 716.8, (8, 9), sms=76, l2_mb=64)),
    (("3090",), _gpu("NVIDIA GeForce RTX 3090", 71.0, 35.6, 936.0, (8, 6), sms=82, l2_mb=6)),
    (("3080",), _gpu("NVIDIA GeForce RTX 3080", 59.5, 29.8, 760.0, (8, 6), sms=68, l2_mb=5)),
    # AMD: no compute capability, so no occupancy figures (its register files and waves differ); sms are compute
    # units, and l2_mb the L2 of all eight dies (4 MB each; the Infinity Cache behind it is not counted).
    (("MI300X",), _gpu("AMD Instinct MI300X", 1307.4, 163.4, 5300.0, vendor="AMD", sms=304, l2_mb=32)),
    (("MI325X",), _gpu("AMD Instinct MI325X", 1307.4, 163.4, 6000.0, vendor="AMD", sms=304, l2_mb=32)),
    (("MI350X",), _gpu("AMD Instinct MI350X", 2307.0, 144.2, 8000.0, vendor="AMD", sms=256, l2_mb=32)),
    (("MI355X",), _gpu("AMD Instinct MI355X", 2516.6, 157.3, 8000.0, vendor="AMD", sms=256, l2_mb=32)),
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
             bandwidth_gbs: float | None = None, l2_bytes: int | None = None) -> GPUSpec:
    """Peak figures for an unlisted NVIDIA GPU from its multiprocessor count, clock and compute capability."""
    tensor = _TENSOR_FLOPS_PER_SM_CLOCK.get(capability, 1024)
    lanes = _FP32_LANES_PER_SM.get(capability, _DEFAULT_FP32_LANES)
    fp16 = sm_count * tensor * clock_ghz / 1e3
    fp32 = sm_count * lanes * 2 * clock_ghz / 1e3
    bf16 = fp16 if capability >= (8, 0) else None
    tf32 = fp16 / 2 if capability >= (8, 0) else None
    # Without a bus width to go on, assume a mid-range HBM/GDDR part; the flag tells readers it is a guess.
    return GPUSpec(name, fp16, bf16, fp32, bandwidth_gbs or 1000.0, estimated=True, tf32_tflops=tf32,
                   capability=tuple(capability), sm_count=sm_count, l2_bytes=l2_bytes)


def detect(device_index: int | None = None) -> GPUSpec:
    """The spec of the GPU torch sees, or CPU_INTERPRETER when there is none."""
    if not torch.cuda.is_available():
        return CPU_INTERPRETER
    index = torch.cuda.current_device() if device_index is None else device_index
    name = torch.cuda.get_device_name(index)
    known = lookup(name)
    props = torch.cuda.get_device_properties(index)
    l2_bytes = getattr(props, "L2_cache_size", 0) or None
    if known is not None:
        # The device's own count and cache: a cut-down part of a listed name (an H100 with fewer SMs) says so.
        return replace(known, sm_count=props.multi_processor_count or known.sm_count,
                       l2_bytes=l2_bytes or known.l2_bytes)
    clock_khz = getattr(props, "clock_rate", 0) or 1_500_000
    bus_bits = getattr(props, "memory_bus_width", 0)
    mem_khz = getattr(props, "memory_clock_rate", 0)
    bandwidth = 2 * mem_khz * 1e3 * bus_bits / 8 / 1e9 if bus_bits and mem_khz else None
    return estimate(name, props.multi_processor_count, clock_khz / 1e6, (props.major, props.minor), bandwidth,
                    l2_bytes)


@dataclass(frozen=True)
class Platform:
    """The machine the kernels run on, as the agent is told: the GPU and the compilers' versions."""
    gpu: GPUSpec
    triton: str | None
    cuda: str | None                # torch's CUDA (None: a CPU or ROCm build)
    torch: str


def platform(device_index: int | None = None) -> Platform:
    """This process's GPU (detect) and the installed Triton, CUDA and torch versions."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return Platform(detect(device_index), triton_version, torch.version.cuda, torch.__version__.split("+")[0])
