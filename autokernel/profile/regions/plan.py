"""Regions in the optimization plan: each region a plan entry, ranked with the menu's kernel types by measured time.

After the profiler has planned the menu's types (autokernel/profile/profiler.py), `add_regions` finds the
model's regions (find.py), leaving the menu the modules it replaces whole (the plan's entries of
types that read a module: norms, gated MLPs, rotaries) and its lone ops. Each region's time is
measured as the profiler measures the model: the region's reference (the same ATen ops eager runs)
under torch.profiler, GPU kernel time on a GPU, CPU op time without one, times its instances per
forward pass. A region that took a menu op (a GEMM at the head of its epilogue, a sum in it) takes
that op's calls and time from the menu's entry, so nothing is planned twice; the time the regions
add beyond that comes out of "other". Every entry is then ranked again by time, with its Amdahl
figure; a region's entry names its ops and the model's source lines it covers (`extra["region"]`),
and its file is written to the workspace's regions/ folder.
"""

from __future__ import annotations

import copy
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from autokernel.core import stopwatch
from autokernel.core.contracts import PlanEntry
from autokernel.core.plan import Plan
from autokernel.kernel_types import TYPES, registry
from autokernel.kernel_types.regions import store
from autokernel.kernel_types.regions.inputs import make_inputs
from autokernel.kernel_types.regions.record import Region
from autokernel.profile.regions.find import find_regions

TIMED_CALLS = 5
# A region is timed apart from the model in rounds of TIMED_CALLS calls: ROUNDS at least, more up to MAX_ROUNDS while
# they differ by more than NOISY_SPREAD of their median, and its time is their median. CPU op times vary from run to
# run (one region's share was 100%, 83%, 0.2% and 100% in four runs of one model); a region still that noisy after
# MAX_ROUNDS is named in the plan's caveats.
ROUNDS, MAX_ROUNDS, NOISY_SPREAD = 3, 7, 0.2


def _amdahl(share: float) -> float:
    return 1.0 / ((1.0 - share) + share / 2.0)


def module_types() -> set[str]:
    """The menu types that replace a module whole: their plan entries' module paths are the menu's."""
    return {kt.name for kt in TYPES.values()
            if kt.recognise.module is not None or kt.recognise.replaces_module is not None or kt.fold is not None}


def spread(times: list[float]) -> float:
    """How far apart measurements are: their range over their median (0 for one, or for a zero median)."""
    middle = statistics.median(times)
    return (max(times) - min(times)) / middle if middle > 0 else 0.0


def steady_ms(measure: Callable[[], float]) -> tuple[float, float]:
    """The median of ROUNDS measurements, or of more (up to MAX_ROUNDS) while they spread past NOISY_SPREAD;
    and their spread."""
    times = [measure() for _ in range(ROUNDS)]
    while spread(times) > NOISY_SPREAD and len(times) < MAX_ROUNDS:
        times.append(measure())
    return statistics.median(times), spread(times)


def region_time_ms(region: Region, device: torch.device, calls: int = TIMED_CALLS) -> float:
    """One call's time of the region's reference (one round of `calls`): GPU kernel time on a GPU, CPU op time
    without one."""
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    inputs = make_inputs(region.definition, gen, device)
    on_gpu = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad():
        region.definition.run(inputs)                       # warm-up
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(calls):
                region.definition.run(inputs)
            if on_gpu:
                torch.cuda.synchronize()
    events = prof.events()
    if on_gpu:
        total_us = sum(e.self_device_time_total for e in events)
    else:
        total_us = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    del inputs
    return total_us / 1e3 / calls


def add_regions(plan: Plan, call_sites: list, model: nn.Module, inputs: tuple, workspace: str | Path,
                log: Callable[[str], None] = lambda line: None) -> Plan:
    """The plan with the model's regions in it (see the module's docstring); region files go to workspace/regions."""
    entries = copy.deepcopy(plan.entries)      # the plan stays as it was if anything below fails
    kept_by_menu = {path for e in entries if e.kernel_type in module_types() for path in e.module_paths}
    # A fused type's plan entry names the consumers of the norm it folds; the norms are the menu's too.
    folds = [TYPES[e.kernel_type].fold for e in entries if e.kernel_type in TYPES and TYPES[e.kernel_type].fold]
    kept_by_menu |= {path for path, module in model.named_modules() if any(fold.is_norm(module) for fold in folds)}
    with stopwatch.timed("region capture"):
        found = find_regions(model, inputs, name=plan.model, excluded=lambda path: path in kept_by_menu)
    folder = Path(workspace) / store.FOLDER
    store.add_folder(folder)
    device = next((t.device for t in (*model.parameters(), *inputs) if isinstance(t, torch.Tensor)),
                  torch.device("cpu"))
    total = plan.total_ms or 1.0
    taken_ms = _take_from_menu(entries, call_sites, found.taken, {r.name: r.about.instances for r in found.regions},
                                total)
    measured, noisy = {}, []
    for region in found.regions:
        store.save(region, folder)
        with stopwatch.timed("region timing"):
            time_ms, apart = steady_ms(lambda: region_time_ms(region, device))
        measured[region.name] = time_ms * region.about.instances
        if apart > NOISY_SPREAD:
            noisy.append(f"{region.label}, {apart:.0%} apart")
    # Timed apart from the model, a region can take longer than its ops did inside it, and the shares would add up
    # past 100%. The regions' time can be at most what they took from the menu and the time no entry named: where
    # they measured more, each is scaled down alike to fit, and the plan says so.
    room, added_ms = plan.other_ms + taken_ms, sum(measured.values())
    scale = room / added_ms if added_ms > room else 1.0
    caveats = []
    if scale < 1.0:
        caveats.append(f"timed apart from the model the regions took {added_ms:.3f} ms, more than the "
                            f"{room:.3f} ms their ops can have taken inside it: each region's time is scaled by "
                            f"{scale:.2f} so that the shares add up to 100%")
    if noisy:
        caveats.append(f"noisy: the times of {'; '.join(noisy)} still spread that much over {MAX_ROUNDS} "
                            f"rounds of measurement; their rank may change from run to run")
    added_ms *= scale
    for region in found.regions:
        time_ms = measured[region.name] * scale
        share = min(1.0, time_ms / total)
        entries.append(PlanEntry(rank=0, kernel_type=region.name, dtype=region.definition.dtype,
                                 shapes=[region.shape()], share=share, amdahl_2x=_amdahl(share), time_ms=time_ms,
                                 calls=float(region.about.instances), shape_times_ms=[time_ms],
                                 bound=None, module_paths=region.about.module_paths,
                                 extra={"region": {**region.entry().to_json(),
                                                   "takes": [list(call) for call in found.taken[region.name]]}}))
        log(f"region {region.name}: {' -> '.join(region.ops())} ({region.about.instances}x), "
            f"{region.about.sources[0].show() if region.about.sources else 'no source line'}")
    entries.sort(key=lambda entry: -entry.time_ms)
    for rank, entry in enumerate(entries, start=1):
        entry.rank = rank
    plan.other_ms = max(0.0, plan.other_ms - max(0.0, added_ms - taken_ms))
    plan.entries = entries
    plan.caveats = plan.caveats + caveats
    plan.regions = {"found": len(found.regions), "graphs": found.graphs, "skipped": found.skipped, "folder": str(folder)}
    return plan


def _take_from_menu(entries: list[PlanEntry], call_sites: list, taken: dict, instances: dict,
                     total: float) -> float:
    """Remove from the menu's entries the calls regions took (per region instance); returns the time removed."""
    calls = defaultdict(float)
    for site in call_sites:
        calls[(site.kernel_type, registry.format_shape(site.shape))] += site.calls
    wanted = defaultdict(float)
    for name, region_calls in taken.items():
        for kernel_type, shape in region_calls:
            wanted[(kernel_type, registry.format_shape(shape))] += instances.get(name, 0)
    removed_ms = 0.0
    for entry in list(entries):
        keep_shapes, keep_times = [], []
        for shape, time_ms in zip(entry.shapes, entry.shape_times_ms or [0.0] * len(entry.shapes)):
            key = (entry.kernel_type, registry.format_shape(shape))
            profiled = calls.get(key, 0.0)
            moved = min(wanted.get(key, 0.0), profiled)
            fraction = moved / profiled if profiled else 0.0
            removed_ms += time_ms * fraction
            if fraction < 0.999:
                keep_shapes.append(shape)
                keep_times.append(time_ms * (1.0 - fraction))
        if not keep_shapes:
            entries.remove(entry)
            continue
        if len(keep_shapes) < len(entry.shapes) or sum(keep_times) < entry.time_ms:
            entry.shapes, entry.shape_times_ms = keep_shapes, keep_times
            entry.time_ms = sum(keep_times)
            entry.share = min(1.0, entry.time_ms / total)
            entry.amdahl_2x = _amdahl(entry.share)
    return removed_ms
