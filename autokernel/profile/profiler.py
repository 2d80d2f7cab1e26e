"""Profiles a model with torch.profiler, ranks its kernel types by Amdahl's law and writes the plan.

What is measured: after warm-up, `iters` forward passes under torch.no_grad. On a GPU the time of
an op is the kernel time it launched (self device time); without one it is CPU op time. Times in
the report are per forward pass. Every module call is marked in the trace by a range, and
autokernel/profile/classify.py attributes each op to a kernel type (or "other") with its registry shape.

The plan lists every kernel type with its share of the measured time, the end-to-end speedup if
it ran 2x faster (1 / ((1 - p) + p / 2)), and where its work sits on the GPU's roofline. It
records the model's inputs (shape and dtype of each tensor), so a plan made at other inputs is
told apart from this one.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import types
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from torch import nn

from autokernel.core import hardware, patching, paths, stopwatch
from autokernel.core.contracts import PlanEntry
from autokernel.core.plan import OTHER, Plan, write_plan
from autokernel.judge.timing import roofline
from autokernel.kernel_types import registry
from autokernel.kernel_types.fused_mlp import MLP_POLICY
from autokernel.profile import classify
from autokernel.profile.classify import FOLD_POLICY, RANGE_PREFIX, RootOp, attribute
from autokernel.routing.fold_routing import FOLD_TYPES, search_folds
from autokernel.routing.norm_folding import FoldSearch

COVERAGE_TARGET = 0.95
# with_stack records Python function calls (torch 2.12+), one way a rotary function is recognised.
WITH_STACK = True
REPORT_FILE = "profile_report.json"
PLAN_FILE = "optimization_plan.json"


@dataclass
class OpTime:
    """One root op at one input shape and classification, summed over the model, per forward pass."""
    op: str
    input_shapes: list
    kernel_type: str
    shape: dict | None
    calls: float
    time_ms: float
    module_paths: list[str]


@dataclass
class CallSite:
    """The time one place in the model spends in one kernel type at one shape, per forward pass."""
    kernel_type: str
    module_path: str
    shape: dict
    calls: float
    time_ms: float
    ops: list[str]


@dataclass
class ProfileReport:
    model_name: str
    device: str                 # "cuda" or "cpu"
    device_name: str
    dtype: str                  # "float16", "bfloat16" or "float32"
    inputs: list[dict]          # each tensor input's shape and dtype, as describe_inputs gives them
    timing: str                 # what the times are: GPU kernel time or CPU op time
    iterations: int
    total_ms: float             # all measured time per forward pass
    wall_ms: float              # one forward pass timed without the profiler
    ops: list[OpTime]
    call_sites: list[CallSite]
    other_ms: float             # measured time in ops of no kernel type

    @property
    def attributed_ms(self) -> float:
        return sum(site.time_ms for site in self.call_sites) + self.other_ms

    @property
    def coverage(self) -> float:
        return self.attributed_ms / self.total_ms if self.total_ms > 0 else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "attributed_ms": self.attributed_ms, "coverage": self.coverage}


def amdahl_speedup(share: float, factor: float = 2.0) -> float:
    """End-to-end speedup when a part taking `share` of the time becomes `factor` times faster."""
    return 1.0 / ((1.0 - share) + share / factor)


# --------------------------------------------------------------------------- running the profiler
class _ModuleRanges:
    """Marks every module call in the trace with a range `autokernel::<path>#<input shape>`."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.handles: list = []
        self.open_ranges: list = []

    def __enter__(self) -> "_ModuleRanges":
        self._range_recognised_functions()
        for path, module in patching.hookable_modules(self.model):
            self.handles.append(module.register_forward_pre_hook(
                lambda mod, args, kwargs, path=path: self._enter(path, args, kwargs), with_kwargs=True))
            # always_call keeps the ranges balanced when a forward raises.
            self.handles.append(module.register_forward_hook(lambda *_: self._exit(), always_call=True))
        return self

    def _enter(self, path: str, args: tuple, kwargs: dict) -> None:
        # Few Python calls here: with_stack records every one of them as an event of its own. A nested tensor has
        # no shape (nn.TransformerEncoder's fast path packs a padded batch into one), so it is named by none.
        tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
        shape = ",".join(map(str, tensors[0].shape)) if tensors and not tensors[0].is_nested else ""
        # The ops record_function itself calls: its constructor costs more Python than the range.
        self.open_ranges.append(torch.ops.profiler._record_function_enter_new(f"{RANGE_PREFIX}{path}#{shape}", None))

    def _exit(self) -> None:
        torch.ops.profiler._record_function_exit._RecordFunction(self.open_ranges.pop())

    def __exit__(self, *exc_info) -> None:
        for handle in self.handles:
            handle.remove()
        for namespace, name, function in self.wrapped:
            setattr(namespace, name, function)

    def _range_recognised_functions(self) -> None:
        """A range around each call of a function in the model's own Python modules that a kernel type
        recognises by name (classify.recognised_function_type: rotate_half, apply_rotary_pos_emb).

        torch releases before 2.12 (the GPU image's 2.11) record no Python frames, so a rotary
        written as a function (Hugging Face's apply_rotary_pos_emb) would not be seen by name.
        """
        self.wrapped = []
        namespaces = {sys.modules.get(type(module).__module__) for module in self.model.modules()} - {None}
        for namespace in namespaces:
            for name, function in list(vars(namespace).items()):
                if (isinstance(function, types.FunctionType) and function.__module__ == namespace.__name__
                        and classify.recognised_function_type(name) is not None):
                    self.wrapped.append((namespace, name, function))
                    setattr(namespace, name, _in_range(f"{classify.FUNCTION_RANGE_PREFIX}{name}", function))


def _in_range(label: str, function):
    @functools.wraps(function)
    def ranged(*args, **kwargs):
        handle = torch.ops.profiler._record_function_enter_new(label, None)
        try:
            return function(*args, **kwargs)
        finally:
            torch.ops.profiler._record_function_exit._RecordFunction(handle)
    return ranged


def profile_model(model: nn.Module, inputs, *, warmup: int = 3, iters: int = 10,
                  name: str | None = None) -> ProfileReport:
    """Profile `iters` forward passes of model(*inputs) after `warmup` unprofiled ones."""
    if iters < 1 or warmup < 0:
        raise ValueError(f"need iters >= 1 and warmup >= 0, got iters={iters}, warmup={warmup}")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    device = _model_device(model, inputs)
    on_gpu = device.type == "cuda"
    synchronize = torch.cuda.synchronize if on_gpu else (lambda: None)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            model(*inputs)
        synchronize()
        wall_ms = (time.perf_counter() - start) * 1e3 / iters
        folds = find_profiled_folds(model, inputs)
        with torch.profiler.profile(activities=activities, record_shapes=True, with_stack=WITH_STACK) as prof:
            with _ModuleRanges(model):
                for _ in range(iters):
                    model(*inputs)
                synchronize()
    return _build_report(prof.events(), model, iters, on_gpu, wall_ms, folds=folds,
                         name=name or type(model).__name__, dtype=_model_dtype(model, inputs),
                         inputs=describe_inputs(inputs),
                         device_name=torch.cuda.get_device_name(device) if on_gpu else "cpu")


def find_profiled_folds(model: nn.Module, inputs: tuple) -> dict[str, FoldSearch]:
    """Fused type -> the norms whose output only its consumers read, on one watched forward.

    A module the profiler sees as one kernel of its own (a gated MLP, a rotary module) may be
    replaced by that kernel, so a norm feeding one is not folded (autokernel/routing/norm_folding.py)."""
    search, types = search_folds(model, lambda: model(*inputs), list(FOLD_TYPES.values()), classify.may_be_one_kernel)
    return {kernel_type: FoldSearch([f for f in search.folds if types[f.norm_path].kernel_type == kernel_type],
                                    search.rejected) for kernel_type in FOLD_TYPES}


def describe_inputs(inputs: tuple) -> list[dict]:
    """The shape and dtype of each tensor input, as plans record them: [{"shape": [1, 512], "dtype": "int64"}]."""
    return [{"shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch.")}
            for tensor in inputs if isinstance(tensor, torch.Tensor)]


def _model_device(model: nn.Module, inputs: tuple) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers(), *inputs):
        if isinstance(tensor, torch.Tensor):
            return tensor.device
    return torch.device("cpu")


def _model_dtype(model: nn.Module, inputs: tuple) -> torch.dtype:
    for tensor in (*model.parameters(), *inputs):
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


# --------------------------------------------------------------------------- the report
def _build_report(events, model: nn.Module, iters: int, on_gpu: bool, wall_ms: float, *,
                  name: str, dtype: torch.dtype, inputs: list[dict], device_name: str,
                  folds: dict[str, FoldSearch] | None = None) -> ProfileReport:
    attribution = attribute(events, model, on_gpu, folds)
    per_iteration_ms = 1e-3 / iters
    call_sites = [CallSite(site.kernel_type, site.module_path, site.shape, site.calls / iters,
                           sum(r.time_us for r in site.roots) * per_iteration_ms, sorted({r.name for r in site.roots}))
                  for site in attribution.sites]
    call_sites.sort(key=lambda site: -site.time_ms)
    other_ms = sum(r.time_us for r in attribution.roots if r.kernel_type == OTHER) * per_iteration_ms
    return ProfileReport(
        model_name=name, device="cuda" if on_gpu else "cpu", device_name=device_name,
        dtype=str(dtype).removeprefix("torch."), inputs=inputs,
        timing="GPU kernel time" if on_gpu else "CPU op time",
        iterations=iters, total_ms=attribution.measured_us * per_iteration_ms, wall_ms=wall_ms,
        ops=_op_times(attribution.roots, iters), call_sites=call_sites, other_ms=other_ms)


def _op_times(roots: list[RootOp], iters: int) -> list[OpTime]:
    """Root ops summed by (op, input shapes, kernel type, shape), most time first."""
    members: dict[tuple, list[RootOp]] = defaultdict(list)
    for root in roots:
        input_shapes = [list(s) for s in root.event.input_shapes]
        members[(root.name, json.dumps(input_shapes), root.kernel_type, json.dumps(root.shape))].append(root)
    rows = []
    for (op, input_shapes, kernel_type, shape), same in members.items():
        module_paths = dict.fromkeys(r.module_calls[0].path if r.module_calls else "" for r in same)
        rows.append(OpTime(op, json.loads(input_shapes), kernel_type, json.loads(shape), len(same) / iters,
                           sum(r.time_us for r in same) * 1e-3 / iters, list(module_paths)))
    return sorted(rows, key=lambda row: -row.time_ms)


# --------------------------------------------------------------------------- the plan
# A plan profiled without a GPU says so wherever it is shown (the plan's JSON and table, the run's lines, status).
CPU_CAVEAT = ("profiled on CPU: the shares are CPU op times, which vary from run to run and say nothing of where "
              "a GPU spends its time; the plan only exercises the pipeline")


def build_plan(report: ProfileReport, gpu: hardware.GPUSpec) -> Plan:
    """Kernel types ranked by measured time, each with its Amdahl figure and roofline placement."""
    dtype = getattr(torch, report.dtype)
    by_type: dict[str, list[CallSite]] = defaultdict(list)
    for site in report.call_sites:
        by_type[site.kernel_type].append(site)
    entries = [_plan_entry(kernel_type, sites, report, dtype, gpu) for kernel_type, sites in by_type.items()]
    entries.sort(key=lambda entry: -entry.time_ms)
    for rank, entry in enumerate(entries, start=1):
        entry.rank = rank
    return Plan(model=report.model_name, device=report.device, dtype=report.dtype, entries=entries,
                total_ms=report.total_ms, other_ms=report.other_ms, device_name=report.device_name, gpu=gpu.name,
                inputs=report.inputs, timing=report.timing, wall_ms=report.wall_ms, coverage=report.coverage,
                caveats=[] if report.device == "cuda" else [CPU_CAVEAT],
                extra={"coverage_target": COVERAGE_TARGET, "mlp_policy": MLP_POLICY, "fold_policy": FOLD_POLICY})


def _plan_entry(kernel_type: str, sites: list[CallSite], report: ProfileReport, dtype: torch.dtype,
                gpu: hardware.GPUSpec) -> PlanEntry:
    shape_times: dict[str, float] = defaultdict(float)
    shape_calls: dict[str, float] = defaultdict(float)
    for site in sites:
        shape_times[registry.format_shape(site.shape)] += site.time_ms
        shape_calls[registry.format_shape(site.shape)] += site.calls
    ordered = sorted(shape_times, key=lambda text: -shape_times[text])
    shapes = [registry.parse_shape(text) for text in ordered]
    time_ms = sum(shape_times.values())
    share = time_ms / report.total_ms if report.total_ms > 0 else 0.0
    entry = PlanEntry(rank=0, kernel_type=kernel_type, dtype=report.dtype, time_ms=time_ms, share=share,
                      amdahl_2x=amdahl_speedup(share), calls=sum(shape_calls.values()), shapes=shapes,
                      shape_times_ms=[shape_times[text] for text in ordered],
                      module_paths=sorted({site.module_path for site in sites}))
    if gpu.ridge_point(dtype) is not None:
        # Every call of every shape: the work's place on this GPU's roofline, and, when the times
        # are GPU times, how fast the op runs now.
        calls = [shape for text, shape in zip(ordered, shapes) for _ in range(max(1, round(shape_calls[text])))]
        placed = roofline(registry.get(kernel_type), calls, dtype, time_ms, gpu)
        entry.bound = placed.bound
        if report.device == "cuda":
            entry.throughput, entry.pct_peak = f"{placed.throughput:.1f} {placed.unit}", placed.pct_peak
    return entry


# --------------------------------------------------------------------------- output
def write_outputs(report: ProfileReport, plan: Plan, workspace: str | Path | None = None) -> tuple[Path, Path]:
    """Write profile_report.json and optimization_plan.json into the workspace; return their paths."""
    folder = Path(workspace) if workspace is not None else paths.WORKSPACE
    folder.mkdir(parents=True, exist_ok=True)
    report_path, plan_path = folder / REPORT_FILE, folder / PLAN_FILE
    report_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    write_plan(plan, plan_path)
    return report_path, plan_path


def profile_to_workspace(model: nn.Module, inputs, *, name: str, workspace: str | Path | None = None,
                         warmup: int = 3, iters: int = 10, gpu: hardware.GPUSpec | None = None
                         ) -> tuple[ProfileReport, Plan]:
    """Profile, plan against this machine's GPU (or `gpu`), and write both JSON files into the workspace."""
    with stopwatch.timed("torch profiler"):
        report = profile_model(model, inputs, warmup=warmup, iters=iters, name=name)
    plan = build_plan(report, gpu or hardware.detect())
    with stopwatch.timed("regions"):
        plan = plan_regions(plan, report, model, inputs, workspace)
    write_outputs(report, plan, workspace)
    return report, plan


def plan_regions(plan: Plan, report: ProfileReport, model: nn.Module, inputs, workspace: str | Path | None) -> Plan:
    """The plan with the model's regions ranked in it (autokernel/profile/regions/plan.py); where the model cannot be
    captured, the menu's plan as it was, and why."""
    from autokernel.profile.regions.plan import add_regions

    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    try:
        return add_regions(plan, report.call_sites, model, inputs, workspace if workspace is not None else paths.WORKSPACE)
    except Exception as exc:       # a model Dynamo cannot capture still gets the menu's plan
        plan.regions = {"found": 0, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        return plan


def print_plan(plan: Plan, top: int | None = None, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"Where {plan.model} spends its time ({plan.timing}, {plan.dtype}, "
                        f"{plan.total_ms:.3f} ms per forward pass)")
    for column in ("#", "kernel type", "ms", "share", "2x gives", "bound"):
        table.add_column(column, justify="left" if column in ("kernel type", "bound") else "right", no_wrap=True)
    table.add_column("main shape, or a region's source line", overflow="fold", min_width=12)
    for entry in plan.entries[:top]:
        region = entry.extra.get("region")
        ops = region["ops"] if region else []
        what = f"region: {' -> '.join(ops[:3])}{f' (+{len(ops) - 3})' if len(ops) > 3 else ''}" if region \
            else entry.kernel_type
        where = (region["sources"][0] if region["sources"] else "") if region else registry.format_shape(entry.shapes[0])
        table.add_row(str(entry.rank), what, f"{entry.time_ms:.3f}", f"{entry.share:.1%}",
                      f"{entry.amdahl_2x:.3f}x", entry.bound or "-", where)
    table.add_row("", OTHER, f"{plan.other_ms:.3f}", f"{plan.other_share:.1%}",
                  f"{amdahl_speedup(plan.other_share):.3f}x", "-", "")
    console.print(table)
    for caveat in plan.caveats:
        console.print(f"[yellow]{escape(caveat)}[/yellow]")
    coverage = plan.coverage or 0.0
    style = "green" if coverage >= COVERAGE_TARGET else "bold red"
    console.print(f"[{style}]coverage: {coverage:.1%} of measured time attributed "
                  f"(target {COVERAGE_TARGET:.0%})[/{style}]")

