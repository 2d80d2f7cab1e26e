"""Turns results.tsv into a report: report.md (per-kernel summary and experiment tables) and progress.png.

progress.png plots speedup_vs_pytorch against the experiment number, one colour per kernel:
kept versions (and the baseline) are filled markers, reverted ones hollow, and the running best
of the kept versions is a step line. Failed experiments have no speedup and are only counted in
the tables. The plot needs matplotlib (pip install matplotlib, or the project's [report] extra);
it is drawn with the Agg canvas, so no display is needed and no global backend is switched.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from autokernel import results

MARKDOWN_FILE = "report.md"
PLOT_FILE = "progress.png"


class ReportError(Exception):
    """The report cannot be drawn; the message says what to install or fix."""


def write_report(results_tsv: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """Write out_dir/report.md and out_dir/progress.png from results.tsv; return their paths."""
    rows = results.read_rows(results_tsv)
    if not rows:
        raise ReportError(f"no experiments in {results_tsv}: nothing to report yet")
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    groups = results.group_by_kernel(rows)
    png_path = folder / PLOT_FILE
    draw_progress(groups, png_path)
    markdown_path = folder / MARKDOWN_FILE
    markdown_path.write_text(markdown_report(rows, groups, results_tsv) + "\n")
    return markdown_path, png_path


def _failures(group: list[dict]) -> str:
    kinds = Counter(row["correctness"] or "no result" for row in group if row["correctness"] != results.PASS)
    return ", ".join(f"{kind} {count}" for kind, count in kinds.most_common()) or "none"


def markdown_report(rows: list[dict], groups: list[list[dict]], source: str | Path) -> str:
    lines = ["# AutoKernel report", "",
             f"{len(rows)} experiments from `{source}`, {len(groups)} kernel runs.", "",
             "| kernel | tag | experiments | kept | best speedup vs PyTorch | best throughput | failures |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for group in groups:
        kept = sum(row["status"] == results.STATUS_KEEP for row in group)
        best = results.best_version(group) or {}
        speedup, throughput = best.get("speedup_vs_pytorch"), best.get("throughput")
        lines.append(f"| {group[0]['kernel_type']} | {group[0]['tag']} | {len(group)} | {kept} | "
                     f"{'-' if speedup is None else f'{speedup:.2f}x'} | "
                     f"{'-' if throughput is None else f'{throughput:.4g}'} | {_failures(group)} |")
    lines += ["", "Best: the fastest kept version (or the baseline). Throughput is in bench.py's unit for the kernel: "
                  "GB/s when memory-bound, TFLOP/s when compute-bound. Failures count experiments by their "
                  "correctness verdict.", "",
              f"![speedup over PyTorch per experiment]({PLOT_FILE})", "", "## Experiments", "",
              results.markdown_summary(rows)]
    return "\n".join(lines)


def draw_progress(groups: list[list[dict]], png_path: Path) -> None:
    """The speedup-per-experiment plot, one colour per kernel run."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as exc:
        raise ReportError("progress.png needs matplotlib, which is not installed: pip install matplotlib "
                          "(or pip install -e .[report])") from exc
    figure = Figure(figsize=(10, 5.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    cycle = [entry["color"] for entry in matplotlib.rcParams["axes.prop_cycle"]]
    for index, group in enumerate(groups):
        colour = cycle[index % len(cycle)]
        label = f"{group[0]['kernel_type']} ({group[0]['tag']})"
        timed = [row for row in group if row["speedup_vs_pytorch"] is not None]
        kept = [row for row in timed if row["status"] != results.STATUS_REVERT and row["correctness"] == results.PASS]
        reverted = [row for row in timed if row not in kept]
        axes.scatter([r["experiment"] for r in kept], [r["speedup_vs_pytorch"] for r in kept], color=colour,
                     s=36, zorder=3, label=label)
        axes.scatter([r["experiment"] for r in reverted], [r["speedup_vs_pytorch"] for r in reverted],
                     facecolors="none", edgecolors=colour, s=36, zorder=3)
        if kept:
            best, running = [], 0.0
            for row in kept:
                running = max(running, row["speedup_vs_pytorch"])
                best.append(running)
            # The best so far holds until the kernel's last experiment.
            xs = [r["experiment"] for r in kept] + [group[-1]["experiment"]]
            axes.step(xs, best + best[-1:], where="post", color=colour, linewidth=1.5, zorder=2)
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1, zorder=1)
    axes.set_xlabel("experiment")
    axes.set_ylabel("speedup vs PyTorch (x)")
    axes.set_title("AutoKernel progress: speedup over PyTorch per experiment")
    axes.grid(True, alpha=0.3)
    markers = [Line2D([], [], marker="o", linestyle="", color="black", label="kept"),
               Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color="black", label="reverted"),
               Line2D([], [], color="black", drawstyle="steps-post", label="best so far"),
               Line2D([], [], color="grey", linestyle="--", label="PyTorch (1x)")]
    axes.legend(handles=axes.get_legend_handles_labels()[0] + markers, loc="best", fontsize="small")
    figure.savefig(png_path, dpi=120)
