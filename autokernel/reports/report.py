"""Turns results.tsv into a report: report.md, progress.png, and a JSON summary for scripts.

report.md leads with the end-to-end verdict from verify.py (workspace/verify_report.json's
"verdict": summary, pytorch_best, autokernel_best, speedup, timings_meaningful) when there is one,
then one line per kernel and the experiment tables.

progress.png has one row of two panels per kernel run, experiment number across:
  - left, the speedup over the kernel's baseline, on a log axis;
  - right, the speedup over PyTorch's best (the faster of eager and torch.compile when both were
    timed), on a log axis with the 1.0x line: above it the kernel beats PyTorch;
kept versions (the baseline included) are filled green dots joined by the running best, reverted
ones hollow grey circles, and experiments without a timing (FAIL, CRASH, TIMEOUT) red crosses
along the bottom edge. A red banner says so when the timings are not meaningful (CPU interpreter).
The plot needs matplotlib (a dependency of the package, so the README's install has it); it is drawn
with the Agg canvas, so no display is needed and no global backend is switched. Where it is missing
anyway, report.md is still written, and says why the plot is not there.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from autokernel.core import contracts
from autokernel.core.live import format_duration, format_speedup, plural
from autokernel.core.throughput import Throughput
from autokernel.search import results

MARKDOWN_FILE = "report.md"
PLOT_FILE = "progress.png"
KEPT, REVERTED, FAILED = "#2a9d3f", "#7f7f7f", "#d62728"
NOT_MEANINGFUL = "TIMINGS NOT MEANINGFUL: measured on CPU through the Triton interpreter, not on a GPU"


class ReportError(Exception):
    """The report cannot be drawn; the message says what to install or fix."""


def read_verdict(path: str | Path | None) -> dict | None:
    """verify.py's end-to-end verdict, or None (no report, an older one without a verdict, or unreadable); with
    "runs", the runs whose kernels it verified (VerifyReport.runs; [] where the report does not say)."""
    if path is None or not Path(path).is_file():
        return None
    try:
        data = json.loads(Path(path).read_text())
        verdict = data.get("verdict")
    except (ValueError, AttributeError):
        return None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("summary"), str):
        return None
    runs = data.get("runs")
    return {**{key: verdict.get(key) for key in ("summary", "pytorch_best", "autokernel_best", "speedup",
                                                 "timings_meaningful")},
            "runs": [str(run) for run in runs] if isinstance(runs, list) else []}


def verdict_of_run(verdict: dict | None, rows: list[dict]) -> dict | None:
    """The verdict if it is of the newest run in the rows (it verified that run's kernels); None where it is of
    other runs', or does not say whose: an older verify's verdict beside a newer run's rows would be read as its."""
    if verdict is None or not rows or rows[-1]["tag"] not in verdict["runs"]:
        return None
    return verdict


class ReportFiles(NamedTuple):
    markdown: Path
    plot: Path | None              # None when it could not be drawn
    plot_problem: str | None       # why not (report.md says so too)


def write_report(results_tsv: str | Path, out_dir: str | Path, *, verify_report: str | Path | None = None,
                 throughput: Throughput | None = None, plan_caveats: list[str] = (),
                 titles: dict[str, str] | None = None) -> ReportFiles:
    """Write out_dir/report.md and out_dir/progress.png from results.tsv; return their paths.

    A plot that cannot be drawn (matplotlib missing) costs the plot alone: report.md is written
    regardless, saying why the plot is not there. plan_caveats: what the run's plan says of its own times (state.json:
    profiled on CPU, noisy, scaled to fit). titles: what each region kernel type computes (Job.title), said first."""
    rows = results.read_rows(results_tsv)
    if not rows:
        raise ReportError(f"no experiments in {results_tsv}: nothing to report yet")
    groups = results.group_by_kernel(rows)
    try:
        figure, problem = progress_figure(groups), None
    except ReportError as exc:
        figure, problem = None, str(exc)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    png_path = folder / PLOT_FILE
    if figure is not None:
        figure.savefig(png_path, dpi=100)
    markdown_path = folder / MARKDOWN_FILE
    markdown_path.write_text(markdown_report(rows, groups, results_tsv, read_verdict(verify_report), throughput,
                                             plot_problem=problem, plan_caveats=plan_caveats, titles=titles) + "\n")
    return ReportFiles(markdown_path, png_path if figure is not None else None, problem)


def _failures(group: list[dict]) -> str:
    kinds = Counter(row["correctness"] or "no result" for row in group if row["correctness"] != contracts.PASS)
    return ", ".join(f"{kind} {count}" for kind, count in kinds.most_common()) or "none"


def _meaningless(rows: list[dict]) -> bool:
    return any(row.get("timings_meaningful") is False for row in rows)


def _verdict_lines(verdict: dict) -> list[str]:
    lines = ["## End to end (verify.py)", "", f"**{verdict['summary']}**", ""]
    table = [("PyTorch's best", verdict.get("pytorch_best")), ("AutoKernel's best", verdict.get("autokernel_best"))]
    rows = [f"| {label} | {entry.get('name') or entry.get('variant', '-')} | {entry.get('ms', float('nan')):.3f} |"
            for label, entry in table if isinstance(entry, dict)]
    if rows:
        lines += ["| | variant | ms |", "| --- | --- | ---: |", *rows, ""]
    if verdict.get("timings_meaningful") is False:
        lines += ["These end-to-end timings are not meaningful (not measured on a GPU).", ""]
    return lines


def cost_lines(rows: list[dict]) -> list[str]:
    """What each run's LLM calls cost, from its rows' tokens and prices (a call without a price counted apart)."""
    by_tag: dict[str, list[dict]] = {}
    for row in rows:
        by_tag.setdefault(row["tag"], []).append(row)
    lines = ["## Cost", "", "| run | LLM tokens | cached | reasoning | cost |", "| --- | ---: | ---: | ---: | ---: |"]
    for tag, tagged in by_tag.items():
        unpriced = sum(1 for row in tagged if row["llm_tokens"] and row["cost_usd"] is None)
        cost = f"${sum(row['cost_usd'] or 0.0 for row in tagged):.4f}" + (
            f" + {plural(unpriced, 'reply', 'replies')} without a price" if unpriced else "")
        lines.append(f"| {tag} | {sum(row['llm_tokens'] or 0 for row in tagged):,} | "
                     f"{sum(row['llm_cached_tokens'] or 0 for row in tagged):,} | "
                     f"{sum(row['llm_reasoning_tokens'] or 0 for row in tagged):,} | {cost} |")
    return lines + [""]


def failure_lines(rows: list[dict], titles: dict[str, str] | None = None) -> list[str]:
    """Every experiment the judge did not pass, with its reason (the run's log, workspace/runs/<tag>.jsonl, has the
    whole error, the hypothesis and the diff)."""
    failed = [row for row in rows if row["correctness"] != contracts.PASS]
    if not failed:
        return []
    lines = ["## Failures", "", "| exp | run | kernel | verdict | reason | description |",
             "| ---: | --- | --- | --- | --- | --- |"]
    for row in failed:
        reason = (row.get("reason") or "-").replace("|", "\\|")
        description = (row["description"] or "").replace("|", "\\|")
        lines.append(f"| {row['experiment']} | {row['tag']} | {_kernel(row, titles)} | {row['correctness'] or 'no result'} "
                     f"| {reason} | {description} |")
    return lines + ["", "The whole error, the hypothesis and the candidate's diff of each are in the run's log, "
                        "workspace/runs/<run>.jsonl.", ""]


def throughput_lines(throughput: Throughput | None) -> list[str]:
    """The run's pace: experiments per hour per GPU and overall, and each GPU's idle time (state.json's Throughput)."""
    if throughput is None or not throughput.gpus:
        return []
    overall = throughput.experiments_per_hour()
    lines = ["## Throughput", "", f"{format_duration(throughput.wall_s)} of loop time; "
             + ("under a minute: no rate yet" if overall is None else f"{overall:.1f} experiments/hour overall"), "",
             "| GPU | experiments | experiments/hour | busy | idle |", "| --- | ---: | ---: | ---: | ---: |"]
    for label, use in sorted(throughput.gpus.items()):
        rate = throughput.experiments_per_hour(label)
        lines.append(f"| {label} | {use.experiments} | {'-' if rate is None else f'{rate:.1f}'} | "
                     f"{format_duration(use.busy_s)} | {format_duration(throughput.idle_s(label))} |")
    lines += ["", "Busy: judging a candidate (or a baseline). Idle: waiting for the loop (the agent, commits) "
                  "or for other GPUs' candidates at a job's end.", ""]
    return lines + job_span_lines(throughput)


def job_span_lines(throughput: Throughput) -> list[str]:
    """With several GPUs: when each job was in flight (on the loop's clock) and which GPUs judged its benches."""
    if not throughput.jobs:
        return []
    spans = sorted(throughput.jobs.items(), key=lambda item: item[1].started_s)
    ends = [(span.started_s, span.ended_s if span.ended_s is not None else throughput.wall_s) for _, span in spans]
    most = max(sum(start <= moment < end for start, end in ends) for moment, _ in ends)
    lines = ["### Jobs in flight", "", "| job | started | ended | benches judged, by GPU |", "| --- | ---: | ---: | --- |"]
    for name, span in spans:
        benches = ", ".join(f"{label} {count}" for label, count in sorted(span.benches.items())) or "-"
        ended = "open (--resume goes on)" if span.ended_s is None else format_duration(span.ended_s)
        lines.append(f"| {name} | {format_duration(span.started_s)} | {ended} | {benches} |")
    return lines + ["", f"Times on the loop's clock; up to {most} jobs were in flight at once, side by side on the "
                        f"GPUs. Benches include each job's two baseline runs.", ""]


def markdown_report(rows: list[dict], groups: list[list[dict]], source: str | Path, verdict: dict | None = None,
                    pace: Throughput | None = None, *, plot_problem: str | None = None,
                    plan_caveats: list[str] = (), titles: dict[str, str] | None = None) -> str:
    lines = ["# AutoKernel report", ""]
    if verdict_of_run(verdict, rows):
        lines += _verdict_lines(verdict)
    elif verdict:
        lines += ["## End to end (verify.py)", "", f"Run {rows[-1]['tag']} is not verified yet: the last verify "
                  f"checked the kernels of {', '.join(verdict['runs']) or 'no run of the manifest'}. "
                  "`autokernel verify` checks this run's.", ""]
    if _meaningless(rows):
        lines += [f"> **{NOT_MEANINGFUL}.** The keep decisions made from them are not either.", ""]
    lines += [f"> The plan: {caveat}" for caveat in plan_caveats] + ([""] if plan_caveats else [])
    baselines = sum(row["status"] == contracts.STATUS_BASELINE for row in rows)
    lines += [f"{plural(len(rows), 'row')} from `{source}`: {plural(len(rows) - baselines, 'experiment')} and "
              f"{plural(baselines, 'baseline')}, in {plural(len(groups), 'kernel run')}.", "",
              "| kernel | tag | experiments | kept | best vs PyTorch eager | best vs PyTorch's best | outcome "
              "| best throughput | failures |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for group in groups:
        kept = sum(row["status"] == contracts.STATUS_KEEP for row in group)
        best = results.best_version(group) or {}
        speedup, vs_best, throughput = best.get("speedup_vs_pytorch"), results.speedup_vs_best(best), best.get("throughput")
        outcome = _outcome(group, best, vs_best)
        lines.append(f"| {_kernel(group[0], titles)} | {group[0]['tag']} | {results.experiments_of(group)} | {kept} | "
                     f"{format_speedup(speedup)} | {format_speedup(vs_best)} | "
                     f"{outcome} | {'-' if throughput is None else f'{throughput:.4g}'} | {_failures(group)} |")
    lines += ["", "Best: the fastest kept version (or the baseline). Speedups compare times per call, launch "
                  "overhead included; PyTorch's best is the faster of eager and torch.compile (timed with the "
                  "baseline). \"no gain\": the best is not faster than PyTorch's best, and the loop saved nothing "
                  f"for the model. \"{contracts.SPEED_UNKNOWN}\": timed in Triton's interpreter, which says "
                  "nothing of speed; the kernel passed the judge and was saved so verify can be tried. Throughput is in bench.py's unit for the kernel: GB/s when memory-bound, "
                  "TFLOP/s when compute-bound. Experiments do not count the baseline, as `autokernel status` does not. Failures count experiments "
                  "by their correctness verdict.", "",
              *cost_lines(rows), *failure_lines(rows, titles),
              *throughput_lines(pace),
              f"![speedup per experiment]({PLOT_FILE})" if plot_problem is None else f"(No plot: {plot_problem}.)",
              "", "## Experiments", "",
              results.markdown_summary(rows, titles)]
    return "\n".join(lines)


def _kernel(row: dict, titles: dict[str, str] | None) -> str:
    """A row's kernel type as people read it: a region's ops first (its type is a hash), where the run's jobs say them."""
    return contracts.titled(row["kernel_type"], (titles or {}).get(row["kernel_type"], ""))


def _outcome(group: list[dict], best: dict, vs_best: float | None) -> str:
    """A kernel run's outcome: faster than PyTorch's best, no gain, or, without meaningful timings, correct
    and no more (the CPU interpreter's times say nothing of speed); "-" with nothing to judge."""
    if not best:
        return "-"
    if _meaningless(group):
        return contracts.SPEED_UNKNOWN
    return "-" if vs_best is None else "faster" if vs_best > 1 else contracts.NO_GAIN


def _kernel_summary(group: list[dict]) -> dict:
    baseline = next((row for row in group if row["status"] == contracts.STATUS_BASELINE), None)
    best = results.best_version(group)
    base_latency = baseline["latency_us"] if baseline else None
    best_latency = best["latency_us"] if best else None
    return {"kernel_type": group[0]["kernel_type"], "tag": group[0]["tag"],
            "experiments": [group[0]["experiment"], group[-1]["experiment"]], "count": len(group),
            "kept": sum(row["status"] == contracts.STATUS_KEEP for row in group),
            "baseline_latency_us": base_latency, "best_latency_us": best_latency,
            "speedup_over_baseline": base_latency / best_latency if base_latency and best_latency else None,
            "best_speedup_vs_pytorch": best["speedup_vs_pytorch"] if best else None,
            "best_speedup_vs_pytorch_best": results.speedup_vs_best(best) if best else None,
            "failures": dict(Counter(row["correctness"] or "no result" for row in group
                                     if row["correctness"] != contracts.PASS)),
            "timings_meaningful": not _meaningless(group),
            "outcome": _outcome(group, best or {}, results.speedup_vs_best(best) if best else None)}


def summary_json(rows: list[dict], verdict: dict | None = None, throughput: Throughput | None = None) -> dict:
    """What report.md says, as data: the verdict, the run's pace (state.json's Throughput) and one record per kernel run."""
    return {"verdict": verdict_of_run(verdict, rows), "experiments": len(rows), "throughput": throughput.to_json() if throughput else None,
            "kernels": [_kernel_summary(group) for group in results.group_by_kernel(rows)]}


# ---------------------------------------------------------------------- the plot
def _series(group: list[dict]):
    baseline = next((row for row in group if row["status"] == contracts.STATUS_BASELINE), None)
    base_latency = baseline["latency_us"] if baseline else None
    for row in group:
        timed = row["correctness"] == contracts.PASS and row["latency_us"]
        over_baseline = base_latency / row["latency_us"] if timed and base_latency else None
        kind = ("failed" if not timed else "kept" if row["status"] != contracts.STATUS_REVERT else "reverted")
        yield row, kind, over_baseline, results.speedup_vs_best(row) if timed else None


def _draw_panel(axes, group: list[dict], which: int, title: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
    from matplotlib.transforms import blended_transform_factory

    points = [(row["experiment"], kind, values[which]) for row, kind, *values in _series(group)]
    kept = [(x, y) for x, kind, y in points if kind == "kept" and y]
    reverted = [(x, y) for x, kind, y in points if kind == "reverted" and y]
    failed = [x for x, kind, _ in points if kind == "failed"]
    if kept:
        # Each kept version is the fastest so far (by latency), so the best so far is simply the last one kept.
        best = [y for _, y in kept]
        xs = [x for x, _ in kept] + [group[-1]["experiment"]]
        axes.step(xs, best + best[-1:], where="post", color=KEPT, linewidth=1.5, zorder=2)
        axes.scatter(*zip(*kept), color=KEPT, s=30, zorder=3)
    if reverted:
        axes.scatter(*zip(*reverted), facecolors="none", edgecolors=REVERTED, s=30, zorder=3)
    if failed:
        bottom = blended_transform_factory(axes.transData, axes.transAxes)
        axes.scatter(failed, [0.04] * len(failed), marker="x", color=FAILED, s=30, zorder=3, transform=bottom,
                     clip_on=False)
    timed = [y for *_, y in points if y]
    if not timed:
        axes.text(0.5, 0.75, "no timings to compare in results.tsv", transform=axes.transAxes, ha="center",
                  va="center", color=REVERTED)
    axes.set_yscale("log")
    low, high = min(timed + [1.0]), max(timed + [1.0])
    axes.set_ylim(low / 1.6, high * 1.6)
    narrow = high / low < 10
    axes.yaxis.set_major_locator(LogLocator(subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.yaxis.set_minor_formatter(NullFormatter())
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    if which == 1:
        axes.axhline(1.0, color="black", linestyle="--", linewidth=1, zorder=1)
    axes.set_title(title, fontsize="medium")
    axes.grid(True, which="both", alpha=0.25)
    axes.set_xlim(group[0]["experiment"] - 0.5, group[-1]["experiment"] + 0.5)


def progress_figure(groups: list[list[dict]]):
    """One row per kernel run: speedup over its baseline (left) and over PyTorch's best (right), log axes."""
    try:
        import matplotlib  # noqa: F401  (first: a missing package must fail here, not halfway through)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as exc:
        raise ReportError("progress.png needs matplotlib, a dependency of autokernel that is missing here: "
                          "pip install matplotlib") from exc
    meaningless = _meaningless([row for group in groups for row in group])
    figure = Figure(figsize=(12, 1.2 + 2.8 * len(groups)), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(len(groups), 2, squeeze=False)
    several_runs = len({group[0]["tag"] for group in groups}) > 1
    for (left, right), group in zip(grid, groups):
        summary = _kernel_summary(group)
        name = (f"{group[0]['kernel_type']}" + (f" [{group[0]['tag']}]" if several_runs else "")
                + f" (exp {group[0]['experiment']}-{group[-1]['experiment']})")
        gain, vs_best = summary["speedup_over_baseline"], summary["best_speedup_vs_pytorch_best"]
        _draw_panel(left, group, 0, f"{name}: best {format_speedup(gain)} over its baseline" if gain else name)
        _draw_panel(right, group, 1, f"best {format_speedup(vs_best)} vs PyTorch's best" if vs_best else "vs PyTorch's best")
        left.set_ylabel("speedup over baseline")
        right.set_ylabel("speedup over PyTorch's best")
    for axes in grid[-1]:
        axes.set_xlabel("experiment")
    handles = [Line2D([], [], marker="o", linestyle="-", color=KEPT, label="kept (and the best so far)"),
               Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color=REVERTED, label="reverted"),
               Line2D([], [], marker="x", linestyle="", color=FAILED, label="failed, crashed or timed out"),
               Line2D([], [], color="black", linestyle="--", label="PyTorch's best (1x)")]
    figure.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small")
    if meaningless:
        figure.suptitle(NOT_MEANINGFUL, color="white", fontweight="bold",
                        bbox={"facecolor": FAILED, "edgecolor": "none", "pad": 6})
    return figure
