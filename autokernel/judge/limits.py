"""What limits a kernel: the judge's summary for the agents, never used for the verdict.

Per timed shape (measured): the bandwidth and FLOP/s the kernel achieved, from the judge's median
GPU time and the registry's bytes and FLOPs for the shape (the fewest bytes a call must move, so
real traffic can only be higher), as a share of this GPU's peaks; its roofline bound (arithmetic
intensity against the ridge point of the compute peak that applies: tensor cores for the matrix
products of matmul-like types, TF32 for float32 ones when PyTorch's setting allows it, else the
float32 lanes where elementwise and reduction kernels compute); and the headroom left, against the
larger of the roofline's time and the launch floor the judge measured (the GPU time of the smallest
launch, timing.launch_floor_ms): a shape whose roofline time is below the floor is latency-bound, and
no kernel reaches its roofline there.

Per launched Triton kernel (theoretical): how many blocks fit on one multiprocessor, limited by
registers, shared memory, resident warps and resident blocks (hardware.SM_LIMITS), and which of
these binds. The inputs are the compiled figures the kernel's own process reported
(judge_link.CandidateWorker.compiled), so this is a hint, not a measurement. A profiler's
"achieved occupancy" would have to be read inside the kernel's process, whose reports the judge
does not trust, so the judge does not ask for it.

Under Triton's CPU interpreter there is no GPU: the summary says so and carries no figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from autokernel.core.hardware import GPUSpec, SMLimits
from autokernel.kernel_types import registry
from autokernel.kernel_types.base import KernelType

THREADS_PER_WARP = 32
NO_GPU_NOTE = ("no GPU figures: the kernel ran in Triton's CPU interpreter, which has no bandwidth, "
               "FLOP/s or occupancy to report")


@dataclass
class ShapeLimits:
    """Measured: the GPU time of one timed shape set against the GPU's peaks."""
    shape: str
    latency_us: float
    bytes_moved: float            # the registry's fewest bytes for the shape
    flops: float
    achieved_gbs: float
    pct_bandwidth: float
    achieved_tflops: float
    compute_peak: str             # which rate: "fp16 tensor", "bf16 tensor", "tf32 tensor" or "fp32"
    pct_compute: float | None
    intensity: float              # FLOP per byte
    ridge: float | None           # FLOP per byte where the compute peak takes over from bandwidth
    bound: str                    # "memory" or "compute"
    headroom: float | None        # latency over the least time reachable: max(roofline_us, floor_us)
    roofline_us: float | None = None   # the time the binding resource needs at its peak
    floor_us: float | None = None      # the measured launch floor (None: not measured, as under the interpreter)
    limit: str = ""               # what the headroom is measured against: "memory", "compute" or "launch"


@dataclass
class Occupancy:
    """Theoretical: how many blocks of one compiled kernel fit on a multiprocessor, and why no more."""
    kernel: str
    threads_per_block: int
    blocks_per_sm: int
    warps_per_sm: int
    occupancy_pct: float          # resident warps over the most the multiprocessor holds
    limited_by: list[str]         # the limits that bind (several on a tie)
    blocks_by: dict[str, int]     # blocks per SM each limit alone allows
    spills: int | None


@dataclass
class Limits:
    gpu: str | None               # None: no GPU, and no figures
    note: str
    shapes: list[ShapeLimits] = field(default_factory=list)
    bound: str | None = None      # the bound of the shape where most of the time goes
    occupancy: list[Occupancy] = field(default_factory=list)
    occupancy_note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def summarize(kt: KernelType, dtype: torch.dtype, gpu: GPUSpec, timed: list[tuple[dict, float]],
              compiled: list[dict], *, tf32: bool, floor_us: float | None = None) -> Limits:
    """The summary for (shape, median GPU time in us) pairs and the compiled kernels' figures.

    tf32: whether float32 matrix products may use TF32 (PyTorch's float32 matmul setting); floor_us: the
    measured launch floor."""
    if not gpu.is_gpu:
        return Limits(gpu=None, note=NO_GPU_NOTE)
    estimated = " (peaks estimated: this GPU is not in the database)" if gpu.estimated else ""
    # A zero time (below the events' resolution, on a GPU whose peaks are estimated, so unchecked) has no rate.
    shapes = [shape_limits(kt, shape, dtype, latency_us, gpu, tf32=tf32, floor_us=floor_us)
              for shape, latency_us in timed if latency_us > 0]
    slowest = max(shapes, key=lambda s: s.latency_us, default=None)
    limits = gpu.sm_limits
    if limits is None:
        occupancy, occupancy_note = [], f"none: no per-multiprocessor limits known for {gpu.name}"
    else:
        occupancy = [o for o in (occupancy_of(figures, limits) for figures in compiled) if o is not None]
        occupancy_note = ("theoretical: from the registers, shared memory and warps the compiler reported for "
                          "each kernel's latest compilation (the last timed shape's)"
                          if occupancy else "none: the kernel's process reported no compiled kernels")
    return Limits(gpu=gpu.name, note=f"measured GPU time against {gpu.name}'s datasheet peaks{estimated}",
                  shapes=shapes, bound=slowest.bound if slowest else None, occupancy=occupancy,
                  occupancy_note=occupancy_note)


def shape_limits(kt: KernelType, shape: dict, dtype: torch.dtype, latency_us: float, gpu: GPUSpec,
                 *, tf32: bool, floor_us: float | None = None) -> ShapeLimits:
    moved = float(kt.bytes_moved(shape, registry.dtype_size(dtype)))
    flops = float(kt.flops(shape))
    seconds = latency_us / 1e6
    gbs = moved / seconds / 1e9
    tflops = flops / seconds / 1e12
    peak_name, peak = gpu.compute_peak(dtype, matrix=kt.matrix, tf32=tf32)
    ridge = peak * 1e12 / (gpu.mem_bandwidth_gbs * 1e9) if peak else None
    intensity = flops / max(moved, 1.0)
    pct_bandwidth = 100 * gbs / gpu.mem_bandwidth_gbs
    pct_compute = 100 * tflops / peak if peak else None
    compute_bound = ridge is not None and intensity > ridge
    bound = "compute" if compute_bound else "memory"
    roofline_us = max(moved / (gpu.mem_bandwidth_gbs * 1e9), flops / (peak * 1e12) if peak else 0.0) * 1e6
    reachable_us = max(roofline_us, floor_us or 0.0)
    return ShapeLimits(registry.format_shape(shape), latency_us, moved, flops, gbs, pct_bandwidth, tflops, peak_name,
                       pct_compute, intensity, ridge, bound, latency_us / reachable_us if reachable_us > 0 else None,
                       roofline_us, floor_us, "launch" if floor_us and floor_us > roofline_us else bound)


def occupancy_of(figures: dict, limits: SMLimits) -> Occupancy | None:
    """Blocks per multiprocessor of one compiled kernel, as NVIDIA's occupancy calculator counts them:
    registers allocated per warp in units of limits.register_unit, shared memory per block (plus
    the system's reserve) in units of limits.shared_unit. None without a warp count."""
    warps = figures.get("num_warps")
    if not isinstance(warps, int) or warps <= 0:
        return None
    registers = figures.get("registers") or 0
    shared = figures.get("shared_bytes") or 0
    per_warp = _round_up(registers * THREADS_PER_WARP, limits.register_unit)
    per_block = _round_up(shared + limits.shared_reserved, limits.shared_unit)
    blocks_by = {
        "registers": (limits.registers // per_warp) // warps if per_warp else limits.max_blocks,
        "shared memory": limits.shared_bytes // per_block if per_block else limits.max_blocks,
        "warps": limits.max_warps // warps,
        "blocks": limits.max_blocks,
    }
    blocks = min(blocks_by.values())
    return Occupancy(kernel=str(figures.get("kernel", "?")), threads_per_block=warps * THREADS_PER_WARP,
                     blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                     occupancy_pct=100 * blocks * warps / limits.max_warps,
                     limited_by=[name for name, count in blocks_by.items() if count == blocks],
                     blocks_by=blocks_by, spills=figures.get("spills"))


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


# --------------------------------------------------------------------------- reading it
def describe(limits: dict | None) -> list[str]:
    """A bench result's `limits` field as lines for the agent's prompt and the judge's printout."""
    if not limits:
        return []
    if not limits.get("gpu"):
        return [f"what limits this kernel: {limits.get('note') or NO_GPU_NOTE}"]
    lines = [f"what limits this kernel ({limits.get('note', '')}):"]
    for s in limits.get("shapes") or []:
        compute = f"{_num(s['achieved_tflops'])} TFLOP/s = {_num(s['pct_compute'])}% of {s['compute_peak']} peak"
        ridge = f"ridge {_num(s['ridge'])}" if s.get("ridge") else "no ridge known"
        headroom = _headroom(s)
        lines.append(f"- {s['shape']} (measured): {_num(s['achieved_gbs'])} GB/s = {_num(s['pct_bandwidth'])}% of "
                     f"peak bandwidth, {compute}; {s['bound']}-bound ({_num(s['intensity'])} FLOP/byte, {ridge}), "
                     f"{headroom}")
    for o in limits.get("occupancy") or []:
        by = ", ".join(f"{name} {count}" for name, count in o["blocks_by"].items())
        fits = f"{o['blocks_per_sm']} blocks/SM" if o["blocks_per_sm"] else "no block fits on an SM"
        lines.append(f"- {o['kernel']} (theoretical occupancy): {o['threads_per_block']} threads/block, {fits}, "
                     f"{o['warps_per_sm']} warps = {_num(o['occupancy_pct'])}% occupancy, limited by "
                     f"{' and '.join(o['limited_by'])} (blocks allowed by {by})")
    if limits.get("occupancy_note"):
        lines.append(f"- occupancy: {limits['occupancy_note']}")
    return lines


def _headroom(s: dict) -> str:
    """How far the shape is from the least time it can take: its roofline or, above it, the launch floor."""
    if not s.get("headroom"):
        return "headroom unknown"
    if s.get("limit") == "launch":
        return (f"latency-bound: its roofline time, {_num(s['roofline_us'])} us, is below the launch floor "
                f"({_num(s['floor_us'])} us measured for the smallest launch), so at most {_num(s['headroom'])}x "
                f"left above that floor")
    floor = f" (launch floor {_num(s['floor_us'])} us)" if s.get("floor_us") else ""
    return f"at most {_num(s['headroom'])}x left on {'bandwidth' if s['bound'] == 'memory' else 'compute'}{floor}"


def _num(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
