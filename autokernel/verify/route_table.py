"""Measures, for every kernel and every call signature a model makes, whether our kernel beats PyTorch there.

At each signature (a Site the router noted, with a copy of its first inputs) four times are taken
on the GPU, per call (autokernel/verify/latency.py):
  - ours eagerly and PyTorch eagerly (what the model would otherwise run at that call: the
    module's own forward, or the torch function), back to back, launch overhead included;
  - ours and torch.compile of PyTorch's, as GPU time replayed from a CUDA graph, which is what
    a compiled forward pays.
A signature routes eagerly when ours is faster than PyTorch eager by more than the noise, and
under torch.compile when ours is faster than compiled PyTorch by more than the noise. The noise
is the larger of NOISE_FLOOR and the spread of the repeats of the two times compared.
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


def faster_by_more_than_noise(ours: latency.Latency | None, theirs: latency.Latency | None) -> tuple[bool, str]:
    """Whether ours beats theirs by more than the noise, and the figures behind the answer."""
    if ours is None or theirs is None:
        return False, "could not be timed"
    noise = max(NOISE_FLOOR, ours.spread, theirs.spread)
    ratio = theirs.median_ms / ours.median_ms
    verdict = "faster" if ratio > 1 + noise else "not faster"
    return ratio > 1 + noise, f"{verdict}: {ratio:.2f}x (noise {noise:.0%}; ours {ours.us:.1f} us, PyTorch {theirs.us:.1f} us)"


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
    ours = latency.wall_clock(site.run_ours, True)
    ours_gpu = latency.graph_replay(site.run_ours)
    with router.bypassed():      # PyTorch's op as the model has it, none of its inner calls routed
        pytorch = latency.wall_clock(site.run_pytorch, True)
        compiled_gpu = latency.graph_replay(_compiled(site.run_pytorch))
    record.ours_us, record.pytorch_us = ours.us, pytorch.us
    record.ours_gpu_us = ours_gpu.us if ours_gpu else None
    record.compiled_gpu_us = compiled_gpu.us if compiled_gpu else None
    record.route_eager, eager_why = faster_by_more_than_noise(ours, pytorch)
    record.route_compiled, compiled_why = faster_by_more_than_noise(ours_gpu, compiled_gpu)
    record.why = f"eager: {eager_why}; compiled: {compiled_why}"


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
