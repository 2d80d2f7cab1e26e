"""Measures, for every kernel and every call signature a model makes, whether our kernel beats PyTorch there.

At each signature (a Site the router noted, with a copy of its first inputs) four times are taken
on the GPU, per call (autokernel/verify/latency.py), each pair of them in turn, repeat by repeat:
  - ours eagerly and PyTorch eagerly (what the model would otherwise run at that call: the
    module's own forward, or the torch function), back to back, launch overhead included;
  - ours and torch.compile of PyTorch's, as GPU time replayed from a CUDA graph, which is what
    a compiled forward pays.
A signature routes eagerly when ours is faster than PyTorch eager by more than the noise, and
under torch.compile when ours is faster than compiled PyTorch by more than the noise. The speedup is the median of
the pairs' ratios and the noise the larger of NOISE_FLOOR and how far that median stands above its 97.5% lower bound
(latency.paired_speedup): work of another process on the machine slows both sides of a pair alike, where it spread
separate repeats by more than a real gain (a 1.21x GEMM was not routed beside seven other verifies, session 27).
Without a GPU nothing is timed and nothing routes: the interpreter's timings mean nothing.
"""

from __future__ import annotations

from typing import Callable

import torch

from autokernel.core.dtypes import dtype_name
from autokernel.routing.manifest import RouteRecord
from autokernel.verify import latency
from autokernel.verify.containment import ROUTE_TABLE, Drops, describe

NOISE_FLOOR = 0.03
NOT_TIMED_ON_CPU = "not timed: no GPU (the CPU interpreter's timings mean nothing)"


EAGER_PAIRS = 10        # a second of wall clock a signature (50 ms repeats); the bound is then the 2nd smallest ratio


def faster_by_more_than_noise(ours: latency.Latency | None, theirs: latency.Latency | None) -> tuple[bool, str]:
    """Whether ours beats theirs, timed in pairs, by more than the noise, and the figures behind the answer."""
    found = latency.paired_speedup(ours, theirs)
    if found is None:
        return False, "could not be timed"
    speedup, noise = found
    noise = max(NOISE_FLOOR, noise)
    verdict = "faster" if speedup > 1 + noise else "not faster"
    return speedup > 1 + noise, (f"{verdict}: {speedup:.2f}x (noise {noise:.0%}, {ours.repeats} pairs; ours "
                                 f"{ours.us:.1f} us, PyTorch {theirs.us:.1f} us)")


def measure(router, on_gpu: bool, log: Callable[[str], None] = lambda line: None,
            drops: Drops | None = None) -> dict[str, list[RouteRecord]]:
    """A route record for every site the router noted, by kernel name: the four times and the two decisions."""
    records: dict[str, list[RouteRecord]] = {}
    for site in router.sites.values():
        record = RouteRecord(shape=dict(site.shape), dtype=dtype_name(site.dtype), site=site.label, calls=site.calls)
        if not on_gpu:
            record.why = NOT_TIMED_ON_CPU
        elif site.run_ours is None:
            record.why = "no example call was kept for this signature (no room in the GPU memory left to copy it)"
        else:
            log(f"timing {site.kernel.name} at {record.shape} ({record.site})")
            try:
                _time_site(site, record, router)
            except torch.OutOfMemoryError:      # fewer comparisons, never a crash: this site is not routed
                record.route_eager = record.route_compiled = False
                record.why = "not timed: out of GPU memory"
                torch.cuda.empty_cache()
            except Exception as exc:            # this signature's timing broke: it is not routed, and verify goes on
                record.route_eager = record.route_compiled = False
                record.why = f"not timed: {describe(exc)}"
                if drops is not None:
                    drops.add(ROUTE_TABLE, f"{site.kernel.name} at {record.shape}", exc)
        records.setdefault(site.kernel.name, []).append(record)
    return records


@torch.no_grad()
def _time_site(site, record: RouteRecord, router) -> None:
    ours, pytorch = _bypassing(router, False, site.run_ours), _bypassing(router, True, site.run_pytorch)
    ours_wall, pytorch_wall = latency.paired(ours, pytorch, True, repeats=EAGER_PAIRS)
    gpu = latency.graph_replays_paired(ours, _bypassing(router, True, _compiled(site.run_pytorch)))
    ours_gpu, compiled_gpu = gpu if gpu else (None, None)
    record.ours_us, record.pytorch_us = ours_wall.us, pytorch_wall.us
    record.ours_gpu_us = ours_gpu.us if ours_gpu else None
    record.compiled_gpu_us = compiled_gpu.us if compiled_gpu else None
    record.route_eager, eager_why = faster_by_more_than_noise(ours_wall, pytorch_wall)
    record.route_compiled, compiled_why = faster_by_more_than_noise(ours_gpu, compiled_gpu)
    record.why = f"eager: {eager_why}; compiled: {compiled_why}"


def _bypassing(router, bypass: bool, fn: Callable) -> Callable:
    """fn with the router bypassed (PyTorch's op as the model has it, none of its inner calls routed) or not, set
    around each call: the two sides of a pair run in turn, and each pays the same two attribute writes."""
    def call():
        before, router.bypass = router.bypass, bypass
        try:
            return fn()
        finally:
            router.bypass = before
    return call


def _compiled(fn: Callable) -> Callable:
    compiled = torch.compile(fn)

    def call():
        with torch.no_grad():
            return compiled()
    return call


def apply(kernels, records_by_kernel: dict[str, list[RouteRecord]]) -> None:
    """Give each kernel its measured records (the router's "measured" policy reads them)."""
    for kernel in kernels:
        kernel.records = {record.key(): record for record in records_by_kernel.get(kernel.name, [])}
