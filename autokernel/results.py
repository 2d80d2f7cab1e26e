"""The one results.tsv writer and reader: one row per experiment, written to disk the moment it is known.

results.tsv is the lab notebook of a run: every experiment, kept or not, with the judge's numbers.
Rows are appended and fsynced one at a time so a crash or a kill loses nothing already decided.
It is never committed (.gitignore lists it); the git history holds only the kept kernels.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

COLUMNS = ("experiment", "tag", "kernel_type", "throughput", "latency_us", "pct_peak", "speedup_vs_pytorch",
           "correctness", "peak_vram_mb", "description", "status", "wall_seconds", "llm_tokens")
INT_COLUMNS = {"experiment", "llm_tokens"}
FLOAT_COLUMNS = {"throughput", "latency_us", "pct_peak", "speedup_vs_pytorch", "peak_vram_mb", "wall_seconds"}
# The judge's numbers copied from bench.py's JSON result into a row.
RESULT_COLUMNS = ("throughput", "latency_us", "pct_peak", "speedup_vs_pytorch", "correctness", "peak_vram_mb")

PASS = "PASS"      # bench.py's correctness verdict of a kernel that passed every stage
STATUS_BASELINE = "baseline"
STATUS_KEEP = "keep"
STATUS_REVERT = "revert"


class ResultsFileError(Exception):
    """results.tsv exists but is not one this version wrote (another header)."""


def make_row(*, experiment: int, tag: str, kernel_type: str, result: dict, description: str, status: str,
             wall_seconds: float, llm_tokens: int) -> dict:
    row = {column: result.get(column) for column in RESULT_COLUMNS}
    row.update(experiment=experiment, tag=tag, kernel_type=kernel_type, description=description, status=status,
               wall_seconds=wall_seconds, llm_tokens=llm_tokens)
    return row


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    # One row per line, one cell per tab: an agent's description may contain either.
    return " ".join(str(value).split())


def _check_header(path: Path) -> None:
    with path.open(newline="") as handle:
        header = handle.readline().rstrip("\r\n").split("\t")
    if tuple(header) != COLUMNS:
        raise ResultsFileError(f"{path} has columns {header}, expected {list(COLUMNS)}; "
                               f"move it aside to start a new results file")


def append_row(path: str | Path, row: dict) -> None:
    """Append one experiment, writing the header first if the file is new; flushed and fsynced."""
    path = Path(path)
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"results row has unknown columns {sorted(unknown)}")
    is_new = not path.exists() or path.stat().st_size == 0
    if not is_new:
        _check_header(path)
    lines = [] if not is_new else ["\t".join(COLUMNS)]
    lines.append("\t".join(_cell(row.get(column)) for column in COLUMNS))
    with path.open("a", newline="") as handle:
        handle.write("\n".join(lines) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _parse(column: str, text: str):
    if text == "":
        return None
    if column in INT_COLUMNS:
        return int(text)
    if column in FLOAT_COLUMNS:
        return float(text)
    return text


def read_rows(path: str | Path) -> list[dict]:
    """Every row of results.tsv as a dict, numbers parsed and empty cells as None; [] when there is no file."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return []
    _check_header(path)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [{column: _parse(column, row.get(column) or "") for column in COLUMNS} for row in reader]


def group_by_kernel(rows: list[dict]) -> list[list[dict]]:
    """Split rows into one group per optimized kernel: a baseline row opens a new group."""
    groups: list[list[dict]] = []
    open_group: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["tag"], row["kernel_type"])
        if row["status"] == STATUS_BASELINE or key not in open_group:
            open_group[key] = []
            groups.append(open_group[key])
        open_group[key].append(row)
    return groups


def best_version(group: list[dict]) -> dict | None:
    """The fastest kept version of one kernel (the baseline included) that passed; None when none did."""
    kept = [row for row in group if row["status"] in (STATUS_BASELINE, STATUS_KEEP)
            and row["correctness"] == PASS and row["latency_us"]]
    return min(kept, key=lambda row: row["latency_us"], default=None)


def _number(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown_summary(rows: list[dict]) -> str:
    """A markdown overview (one line per kernel) followed by one table of experiments per kernel."""
    if not rows:
        return "No experiments recorded yet."
    groups = group_by_kernel(rows)
    lines = ["| kernel | tag | experiments | kept | baseline latency (us) | best latency (us) | "
             "speedup over baseline | best speedup vs PyTorch |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for group in groups:
        baseline = next((r for r in group if r["status"] == STATUS_BASELINE), None)
        best = best_version(group)
        base_latency = baseline["latency_us"] if baseline else None
        best_latency = best["latency_us"] if best else None
        gain = base_latency / best_latency if base_latency and best_latency else None
        kept = sum(r["status"] == STATUS_KEEP for r in group)
        lines.append(f"| {group[0]['kernel_type']} | {group[0]['tag']} | {len(group)} | {kept} | "
                     f"{_number(base_latency, 1)} | {_number(best_latency, 1)} | {_number(gain, 2)} | "
                     f"{_number(best['speedup_vs_pytorch'] if best else None, 2)} |")
    for group in groups:
        lines += ["", f"## {group[0]['kernel_type']} ({group[0]['tag']}, experiments "
                      f"{group[0]['experiment']}-{group[-1]['experiment']})", "",
                  "| exp | status | correctness | latency (us) | speedup vs PyTorch | tokens | description |",
                  "| ---: | --- | --- | ---: | ---: | ---: | --- |"]
        for row in group:
            description = (row["description"] or "").replace("|", "\\|")
            lines.append(f"| {row['experiment']} | {row['status']} | {row['correctness']} | "
                         f"{_number(row['latency_us'], 1)} | {_number(row['speedup_vs_pytorch'], 2)} | "
                         f"{row['llm_tokens'] or 0} | {description} |")
    return "\n".join(lines)
