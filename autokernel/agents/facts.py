"""What the LLM agent is told about the machine and the launch: the GPU's limits, the software, each
kernel's grid, and the regime of the job's shapes (which picks the playbook's sections).

The regime of a job is read once, from its baseline, so a job's system message stays the same on
every call (the prompt cache's prefix): "latency" where the slowest timed shape's roofline time is
below the launch floor the judge measured, else the roofline's side, "memory" or "compute". Before
the judge has measured (a job's first question has its baseline; this is for other callers) or
without a GPU, it is estimated from the registry's bytes and FLOPs at the job's first shape.
"""

from __future__ import annotations

import math

import torch

from autokernel.core import hardware
from autokernel.core.contracts import BenchResult
from autokernel.judge import limits
from autokernel.kernel_types import registry

# Before the judge has measured a launch floor: the GPU time of one small launch as events time it is a
# few microseconds on current GPUs; a shape whose roofline time is under this is taken as latency-bound.
ASSUMED_LAUNCH_FLOOR_US = 5.0
_MIB = 1024 * 1024


def platform_lines(platform: hardware.Platform) -> list[str]:
    """The GPU (its multiprocessors, L2, per-SM limits, compute capability, peaks) and the software versions."""
    gpu = platform.gpu
    software = (f"Software: Triton {platform.triton or 'not installed'}, CUDA {platform.cuda or 'none'}, "
                f"torch {platform.torch}.")
    if not gpu.is_gpu:
        return [f"GPU: none ({gpu.name}): kernels run in Triton's CPU interpreter, timings mean nothing.", software]
    units = "compute units" if gpu.vendor == "AMD" else "SMs"
    parts = [f"{gpu.sm_count} {units}" if gpu.sm_count else f"{units} unknown",
             f"{gpu.l2_bytes / _MIB:g} MB L2" if gpu.l2_bytes else "L2 size unknown"]
    capability = f", compute capability {gpu.capability[0]}.{gpu.capability[1]}" if gpu.capability else ""
    lines = [f"GPU: {gpu.name}{capability}: {', '.join(parts)}."]
    sm = gpu.sm_limits
    if sm is not None:
        lines.append(f"Per SM: {sm.shared_bytes // 1024} KB shared memory, {sm.registers} 32-bit registers, "
                     f"at most {sm.max_warps} warps and {sm.max_blocks} blocks resident.")
    peaks = ", ".join(f"{name} {value:g} TFLOP/s" for name, value in (
        ("fp16", gpu.fp16_tflops), ("bf16", gpu.bf16_tflops), ("fp32", gpu.fp32_tflops)) if value)
    estimated = " (estimated)" if gpu.estimated else ""
    lines += [f"Peaks{estimated}: {peaks}, memory {gpu.mem_bandwidth_gbs:g} GB/s.", software]
    return lines


def regime(job: dict, gpu: hardware.GPUSpec, baseline: BenchResult | None = None) -> str:
    """"latency", "memory" or "compute": what bounds the job's time (see the module's docstring), measured on
    its baseline where it has one."""
    measured = ((baseline.limits if baseline is not None else None) or {}).get("shapes") or []
    if measured:
        slowest = max(measured, key=lambda shape: shape.get("latency_us") or 0.0)
        return "latency" if slowest.get("limit") == "launch" else slowest.get("bound") or "memory"
    kt = registry.get(job["kernel_type"])
    shapes = job.get("shapes") or [kt.timing_shape]
    dtype = getattr(torch, job.get("dtype") or "float16", torch.float16)
    if not gpu.is_gpu:
        return "compute" if kt.matrix else "memory"
    figures = limits.shape_limits(kt, shapes[0], dtype, 1.0, gpu, tf32=False)
    if figures.roofline_us is not None and figures.roofline_us < ASSUMED_LAUNCH_FLOOR_US:
        return "latency"
    return figures.bound


def launch_lines(compiled: list[dict] | None, gpu: hardware.GPUSpec) -> list[str]:
    """Each launched kernel's grid, programs per multiprocessor and waves (where its occupancy is known)."""
    lines = []
    for kernel in compiled or []:
        grid = kernel.get("grid")
        if not grid:
            continue
        programs = math.prod(grid)
        text = f"launched {kernel.get('kernel', '?')}: grid ({', '.join(map(str, grid))}) = {programs} programs"
        if gpu.sm_count:
            text += f" on {gpu.sm_count} SMs, {programs / gpu.sm_count:.3g} per SM"
            if programs < gpu.sm_count:
                text += f" ({gpu.sm_count - programs} SMs idle)"
            occupancy = limits.occupancy_of(kernel, gpu.sm_limits) if gpu.sm_limits else None
            if occupancy is not None and occupancy.blocks_per_sm:
                waves = programs / (gpu.sm_count * occupancy.blocks_per_sm)
                text += (f"; {occupancy.blocks_per_sm} fit on an SM at once, so {math.ceil(waves)} wave"
                         f"{'s' if math.ceil(waves) > 1 else ''} ({waves:.2g})")
        lines.append(text)
    return lines
