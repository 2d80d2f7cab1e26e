"""Timing and roofline figures: median latency with L2 flushed, throughput and % of peak.

On a GPU every latency is the median of `triton.testing.do_bench`, which flushes the L2 cache
before each timed call. Under the CPU interpreter there is nothing meaningful to time; the
figures are still computed (wall-clock medians) so the pipeline runs end to end, and every
report labels them as not meaningful.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from autokernel.hardware import GPUSpec
from autokernel.registry import KernelType, Shape, dtype_size


def median_latency_ms(fn, on_gpu: bool, *, quick: bool = False) -> float:
    if on_gpu:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10 if quick else 25, rep=40 if quick else 100,
                                             return_mode="median"))
    fn()  # warm-up: the interpreter's first call pays for tracing
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


@dataclass
class Roofline:
    bytes_moved: float
    flops: float
    bound: str                    # "memory" or "compute"
    throughput: float             # GB/s when memory-bound, TFLOP/s when compute-bound
    unit: str
    pct_peak: float | None        # None when the peak is unknown (CPU)


def roofline(kt: KernelType, shapes: list[Shape], dtype: torch.dtype, latency_ms: float, gpu: GPUSpec) -> Roofline:
    """Place total work over total time on the roofline of this GPU."""
    elem = dtype_size(dtype)
    total_bytes = sum(kt.bytes_moved(s, elem) for s in shapes)
    total_flops = sum(kt.flops(s) for s in shapes)
    ridge = gpu.ridge_point(dtype)
    compute_bound = ridge is not None and total_flops / max(total_bytes, 1.0) > ridge
    seconds = latency_ms / 1e3
    if compute_bound:
        throughput = total_flops / seconds / 1e12
        peak = gpu.peak_tflops(dtype)
        return Roofline(total_bytes, total_flops, "compute", throughput, "TFLOP/s", 100 * throughput / peak if peak else None)
    throughput = total_bytes / seconds / 1e9
    peak = gpu.mem_bandwidth_gbs
    return Roofline(total_bytes, total_flops, "memory", throughput, "GB/s", 100 * throughput / peak if peak else None)
