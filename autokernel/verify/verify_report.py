"""verify.py's report, printed: the kernels and their routes, the route table, the six variants and the verdict.

Messages from kernels and models are printed as text, never read as rich markup. `report_console`
decides the width: a terminal's own; where the output is not a terminal (a log file, nohup, CI, a
parent reading a pipe) tables are written whole, as wide as their cells, never cut at 80 columns.
A parent that runs verify with its output on a pipe can set AUTOKERNEL_PLAIN_OUTPUT=1 (full width,
no colour; the sandbox passes AUTOKERNEL_* variables on) or COLUMNS (that width) itself.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autokernel.core.live import format_speedup, plural
from autokernel.core.contracts import titled
from autokernel.kernel_types.regions.record import region_title
from autokernel.verify.report_record import VerifyReport
from autokernel.verify.variants import VARIANTS


PLAIN_OUTPUT_VARIABLE = "AUTOKERNEL_PLAIN_OUTPUT"
FULL_WIDTH = 1000        # columns: wider than any table verify prints, so none is cut or wrapped


def report_console(file: TextIO | None = None) -> Console:
    """The console verify prints on: the terminal's width on a terminal; full width, plain, anywhere else."""
    stream = file or sys.stdout
    if os.environ.get(PLAIN_OUTPUT_VARIABLE, "") not in ("", "0"):
        return Console(file=stream, width=FULL_WIDTH, color_system=None, highlight=False)
    if os.environ.get("COLUMNS", "").isdigit():
        return Console(file=stream)                       # rich reads COLUMNS itself
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    return Console(file=stream) if terminal else Console(file=stream, width=FULL_WIDTH)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_report(report: VerifyReport, console: Console) -> None:
    _print_kernels(report, console)
    _print_route_table(report, console)
    _print_folds(report, console)
    for trial in report.selection:
        verdict = "[green]kept[/green]" if trial["kept"] else "[yellow]dropped[/yellow]"
        console.print(f"end-to-end check of {escape(trial['kernel'])}'s {trial['mode']} routes: {verdict}: "
                      f"{escape(trial['why'])}")
    _print_variants(report, console)
    _print_overhead(report.overhead, console)
    verdict = report.verdict
    colour = "green" if verdict.faster else "yellow"
    console.print(f"[bold {colour}]verdict: {escape(verdict.summary)}[/bold {colour}]")
    _print_headroom(report, console)
    console.print(f"use: {escape(verdict.use_code)}")
    _print_dropped(report, console)
    _print_error_check(report, console)


def _print_folds(report: VerifyReport, console: Console) -> None:
    """Each rewrite (verify/rewrites.py): what it rewrote (batch norms folded, linears concatenated), where on, and
    what it left as it is, and why."""
    # (report section, name, what it lists, what each is, what one left out is)
    for key, name, listed, done, left in (
            ("batch_norm_folding", "batch norm folding", "folds", "folded", "not folded"),
            ("linear_concat", "linear concatenation", "groups", "groups run as one GEMM each", "not concatenated")):
        rewrite = (report.extra or {}).get(key)
        if not rewrite:
            continue
        modes = [mode for mode in ("eager", "compiled") if rewrite.get(mode)]
        console.print(f"{name}: {len(rewrite[listed])} {done}, on {' and '.join(modes) or 'in no mode'}"
                      + "".join(f"; {escape(path)} {left}: {escape(why)}"
                                for path, why in sorted(rewrite["rejected"].items())))


def _print_dropped(report: VerifyReport, console: Console) -> None:
    """Each unit verify left out for a failure, and why (containment.py): the verdict stands without them."""
    if report.dropped:
        console.print(f"[yellow]dropped for failures ({len(report.dropped)}); the verdict stands without them:[/yellow]")
    for dropped in report.dropped:
        console.print(f"  [yellow]{escape(dropped['stage'])}[/yellow]: {escape(dropped['unit'])}: "
                      f"{escape(dropped['reason'])}")


def _print_error_check(report: VerifyReport, console: Console) -> None:
    """The check's result, and what it did not check: a check that routed no kernel call is never a PASS."""
    check = report.correctness
    variants = (f", at most {check.variant_max_error:.3g} in the AutoKernel variants"
                if check.variant_max_error is not None else "")
    measured = f"max error {check.max_error:.3g}{variants} (tolerance {check.tolerance:g}; {check.definition})"
    for line in check.not_checked:
        console.print(f"[yellow]not checked: {escape(line)}[/yellow]")
    if check.passed and check.checked_nothing and report.dropped:
        console.print("[bold yellow]end-to-end error check: NOTHING CHECKED[/bold yellow]: every kernel of ours was "
                      f"dropped for a failure (above), so only PyTorch ran ({measured})")
        return
    if check.passed and check.checked_nothing:
        console.print("[bold yellow]end-to-end error check: NOTHING CHECKED[/bold yellow]: no kernel took a call "
                      f"of this model, so only PyTorch ran ({measured}). Were the kernels optimized for this "
                      "model with these arguments? `autokernel verify` with no model verifies the run's own")
        return
    result = "[bold green]PASS[/bold green]" if check.passed else "[bold red]FAIL[/bold red]"
    calls = "" if check.calls_checked is None else f" ({plural(check.calls_checked, 'kernel call')})"
    console.print(f"end-to-end error check: {result}: the model with every verified call routed{calls}, {measured}")


def _print_kernels(report: VerifyReport, console: Console) -> None:
    checked = {k["name"]: k for k in report.checked["kernels"]}
    table = Table(title=f"Kernels plugged into {report.model} ({report.dtype}, {report.device_name}), "
                        f"one forward pass")
    for column in ("kernel", "calls it was verified for", "routed (measured)", "fell back", "share of model time",
                   "graph op", "main fallback reason"):
        table.add_column(column, no_wrap=column != "main fallback reason")
    ops = {region["name"]: region.get("ops") or [] for region in report.checked.get("regions") or []}
    for kernel in report.kernels:
        reasons = kernel["fallback_reasons"]
        shown = titled(kernel["name"], region_title(ops.get(kernel["name"], [])))    # a region: its ops first
        if kernel.get("variant"):                                 # which of its starters the region's pick kept
            shown += f", {kernel['variant']}"
        table.add_row(shown, str(checked[kernel["name"]]["hits"]),
                      str(kernel["hits"]),
                      str(kernel["fallbacks"]), _percent(kernel["share"]), escape(kernel["graph_op"] or "-"),
                      escape(next(iter(reasons), "-")))
    console.print(table)
    console.print(escape(report.plan))
    if report.replaced_share is not None:
        console.print(f"the kernels routed by measurement cover {_percent(report.replaced_share)} of the profiled time")
    for route in report.checked["module_routes"]:
        for rejection in route["rejections"]:
            console.print(f"[yellow]module {escape(route['path'])} ({escape(route['class'])}) not routed as "
                          f"{escape(rejection)}[/yellow]")


def _print_route_table(report: VerifyReport, console: Console) -> None:
    rows = report.route_table
    if not rows:
        return
    table = Table(title="Route table: our kernel against PyTorch at each call signature (us per call)")
    for column in ("kernel", "shape", "site", "calls", "ours", "PyTorch", "ours GPU", "compiled GPU", "eager",
                   "compiled"):
        table.add_column(column, justify="right" if column in ("calls", "ours", "PyTorch", "ours GPU",
                                                               "compiled GPU") else "left")
    for row in rows:
        shape = ",".join(f"{k}={v}" for k, v in row["shape"].items())
        table.add_row(row["kernel"], shape, escape(row["site"]), str(row["calls"]), _us(row["ours_us"]),
                      _us(row["pytorch_us"]), _us(row["ours_gpu_us"]), _us(row["compiled_gpu_us"]),
                      "routed" if row["route_eager"] else "-", "routed" if row["route_compiled"] else "-")
    console.print(table)
    if not report.timings_meaningful:
        console.print("[yellow]no GPU: nothing timed, so nothing is routed by measurement[/yellow]")


def _print_variants(report: VerifyReport, console: Console) -> None:
    variants = report.variants
    best = report.verdict.pytorch_best
    table = Table(title="End-to-end latency per forward pass (median of repeats, range in brackets)")
    for column in ("variant", "ms", "vs eager", "vs PyTorch's best", "max error", "graph breaks"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    eager_ms = variants.get("eager", {}).get("ms")
    for name, (label, _, _) in VARIANTS.items():
        variant = variants.get(name)
        if variant is None:
            continue
        ms = variant["ms"]
        if ms is None:
            table.add_row(label, f"not run: {escape(variant['failed'] or '?')}", "-", "-", "-", "-")
            continue
        low, high = variant["latency"]["low_ms"], variant["latency"]["high_ms"]
        table.add_row(label, f"{ms:.3f} [{low:.3f}-{high:.3f}]", format_speedup(eager_ms / ms if eager_ms else None),
                      format_speedup(best["ms"] / ms if best else None), f"{variant['error']:.3g}",
                      "-" if variant["graph_breaks"] is None else f"{variant['graph_breaks']} ({variant['graphs']} graphs)")
    console.print(table)
    if not report.timings_meaningful:
        console.print("[bold yellow]CPU run through Triton's interpreter: wall-clock timings, NOT MEANINGFUL"
                      "[/bold yellow]")


def _print_headroom(report: VerifyReport, console: Console) -> None:
    """Why a model can or cannot get much faster than torch.compile (autokernel/verify/headroom.py)."""
    if report.headroom:
        console.print(f"headroom: {escape(report.headroom['summary'])}")


def _print_overhead(overhead: dict | None, console: Console) -> None:
    if not overhead:
        return
    console.print(f"routing overhead, every verified call routed ({overhead['routed_calls_per_forward']} calls "
                  "per forward):")
    for mode in ("eager", "cudagraphs"):
        figures = overhead.get(mode)
        if figures is None:
            continue
        if figures["overhead"] is None:
            console.print(f"  {mode}: not measured ({escape(figures['why_not'])})")
            continue
        console.print(f"  {mode}: routed {figures['routed_ms']:.3f} ms against the sum of its parts "
                      f"{figures['sum_of_parts_ms']:.3f} ms (kernels {figures['kernels_ms']:.3f} + unrouted "
                      f"{figures['unrouted_ms']:.3f}): overhead {figures['overhead']:+.1%}")
    glue = overhead["router_glue"]
    share = glue.get("share_of_routed_eager")
    console.print(f"  router glue (eager; measured call by call): {glue['ms_per_forward']:.3f} ms per forward"
                  f"{f' ({share:.1%} of the routed forward)' if share is not None else ''}; "
                  f"{glue['intercepted_calls_per_forward']} torch calls seen by the function routing at "
                  f"{glue['mode_us_per_call']:.1f} us each")
