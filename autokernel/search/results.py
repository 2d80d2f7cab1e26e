"""The one results.tsv writer and reader: one row per experiment, written to disk the moment it is known.

results.tsv is the lab notebook of a run: every experiment, kept or not, with the judge's numbers.
Rows are appended and fsynced one at a time so a crash or a kill loses nothing already decided.
It is never committed (.gitignore lists it); the git history holds only the kept kernels.

The LLM's tokens are counted three ways: `llm_tokens` (all of a reply's input and output),
`llm_cached_tokens` (of its input, what the provider's prompt cache served) and
`llm_reasoning_tokens` (of its output, hidden reasoning or thinking); `cost_usd` prices each at its
rate (autokernel/agents/usage.py).

`reason` says in one short line why the judge did not pass a candidate (`short_reason`: the stage, the
exception's own line, where in kernel.py); the run's log (autokernel/search/run_log.py) holds the whole
error, the hypothesis and the diff.

A file with any other header (another tool's, or a run of another AutoKernel version) is neither read
nor appended to: a run refuses it before it creates anything (`check_writable`) and asks for it to be
moved aside.
"""

from __future__ import annotations

import csv
import math
import os
import re
from pathlib import Path

from autokernel.core.contracts import PASS, STATUS_BASELINE, STATUS_KEEP, BenchResult

COLUMNS = ("experiment", "tag", "kernel_type", "throughput", "latency_us", "pct_peak", "speedup_vs_pytorch",
           "speedup_vs_compile", "correctness", "timings_meaningful", "peak_vram_mb", "description", "status",
           "wall_seconds", "llm_tokens", "cost_usd",
           "gpu",                                           # the worker's GPU that judged it (empty: not judged)
           "llm_cached_tokens", "llm_reasoning_tokens",
           "reason")                                        # why the judge did not pass it, short (empty: it passed)
INT_COLUMNS = {"experiment", "llm_tokens", "llm_cached_tokens", "llm_reasoning_tokens"}
FLOAT_COLUMNS = {"throughput", "latency_us", "pct_peak", "speedup_vs_pytorch", "speedup_vs_compile", "peak_vram_mb",
                 "wall_seconds", "cost_usd"}
BOOL_COLUMNS = {"timings_meaningful"}
# The judge's numbers copied from bench.py's result (BenchResult) into a row.
RESULT_COLUMNS = ("throughput", "latency_us", "pct_peak", "speedup_vs_pytorch", "speedup_vs_compile", "correctness",
                  "timings_meaningful", "peak_vram_mb")
REASON_CHARS = 160
# An exception's own line in a traceback ("NameError: name 'x' is not defined"), and where in kernel.py it was.
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
KERNEL_LINE = re.compile(r"kernel\.py\"?,? (?:line |:)(\d+)")



class ResultsFileError(Exception):
    """results.tsv exists but is not one this version wrote (another header)."""


def make_row(*, experiment: int, tag: str, kernel_type: str, result: BenchResult, description: str, status: str,
             wall_seconds: float, llm_tokens: int, cost_usd: float | None = None, gpu: str | None = None,
             llm_cached_tokens: int = 0, llm_reasoning_tokens: int = 0) -> dict:
    row = {column: getattr(result, column) for column in RESULT_COLUMNS}
    row.update(experiment=experiment, tag=tag, kernel_type=kernel_type, description=description, status=status,
               wall_seconds=wall_seconds, llm_tokens=llm_tokens, cost_usd=cost_usd, gpu=gpu or None,
               llm_cached_tokens=llm_cached_tokens, llm_reasoning_tokens=llm_reasoning_tokens,
               reason=short_reason(result) or None)
    return row


def short_reason(result: BenchResult) -> str:
    """Why the judge did not pass a result, in one short line ("" when it passed): the stage, the exception's own
    line (else the message's first), and where in kernel.py when the message says."""
    if result.passed:
        return ""
    message = result.message or ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    exception = next((line for line in reversed(lines) if EXCEPTION_LINE.match(line)), None)
    text = exception or (lines[0] if lines else result.correctness or "no result")
    where = KERNEL_LINE.findall(message)
    if where and f"kernel.py:{where[-1]}" not in text:
        text += f" (kernel.py:{where[-1]})"
    stage = f"{result.failed_stage}: " if result.failed_stage else ""
    printable = "".join(c if c.isprintable() else " " for c in f"{stage}{text}")     # kernel code wrote the message
    return " ".join(printable.split())[:REASON_CHARS]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _decimal(value)
    # One row per line, one cell per tab: an agent's description may contain either.
    return " ".join(str(value).split())


def _decimal(value: float, digits: int = 6) -> str:
    """A number as people and spreadsheets read it: plain decimals, never an exponent (3388970, not 3.38897e+06);
    at least `digits` significant digits, and every digit of its whole part."""
    if not math.isfinite(value) or value == 0:
        return repr(value) if value else "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _header(path: Path) -> tuple[str, ...]:
    with path.open(newline="") as handle:
        return tuple(handle.readline().rstrip("\r\n").split("\t"))


def check_writable(path: str | Path) -> None:
    """Raise ResultsFileError unless rows can be appended to path (absent, empty, or this version's header): the
    one file read_rows reads too."""
    path = Path(path)
    if path.exists() and path.stat().st_size and _header(path) != COLUMNS:
        raise ResultsFileError(f"{path} has columns {list(_header(path))}, not this AutoKernel's {list(COLUMNS)}; "
                               f"move it aside (say, mv {path.name} {path.stem}.old.tsv) to start a new one")


def append_row(path: str | Path, row: dict) -> None:
    """Append one experiment, writing the header first if the file is new; flushed and fsynced."""
    path = Path(path)
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise ValueError(f"results row has unknown columns {sorted(unknown)}")
    is_new = not path.exists() or path.stat().st_size == 0
    check_writable(path)
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
    if column in BOOL_COLUMNS:
        return text == "true"
    return text


def read_rows(path: str | Path) -> list[dict]:
    """Every row of results.tsv as a dict, numbers parsed and empty cells as None; [] when there is no file."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return []
    check_writable(path)
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [{column: _parse(column, row.get(column) or "") for column in COLUMNS} for row in reader]


def ensure_row(path: str | Path, row: dict) -> bool:
    """Append row unless results.tsv already has its experiment for its tag (a resumed write); True if written."""
    if any(r["experiment"] == row["experiment"] and r["tag"] == row["tag"] for r in read_rows(path)):
        return False
    append_row(path, row)
    return True


def last_experiment(path: str | Path) -> int:
    """The highest experiment number in results.tsv (0 when none): numbers are never used twice."""
    return max((row["experiment"] for row in read_rows(path)), default=0)


def speedup_vs_best(row: dict) -> float | None:
    """The speedup over PyTorch's best: the faster of eager and torch.compile, when compile was timed."""
    speedups = [row.get(name) for name in ("speedup_vs_pytorch", "speedup_vs_compile") if row.get(name)]
    return min(speedups) if speedups else None


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


def experiments_of(group: list[dict]) -> int:
    """A kernel run's experiments, as status counts them: its rows but the baseline (which is benched, not tried)."""
    return sum(row["status"] != STATUS_BASELINE for row in group)


def _number(value, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown_summary(rows: list[dict], titles: dict[str, str] | None = None) -> str:
    """A markdown overview (one line per kernel) followed by one table of experiments per kernel. titles: what each
    region kernel type computes (Job.title), said first (its type is a hash)."""
    from autokernel.core.contracts import titled
    from autokernel.core.live import format_speedup      # (rich) only when a summary is written

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
        kernel = titled(group[0]["kernel_type"], (titles or {}).get(group[0]["kernel_type"], ""))
        lines.append(f"| {kernel} | {group[0]['tag']} | {experiments_of(group)} | {kept} | "
                     f"{_number(base_latency, 1)} | {_number(best_latency, 1)} | {format_speedup(gain)} | "
                     f"{format_speedup(best['speedup_vs_pytorch'] if best else None)} |")
    for group in groups:
        first, last = group[0]["experiment"], group[-1]["experiment"]
        numbers = f"experiment {first}" if first == last else f"experiments {first}-{last}"
        kernel = titled(group[0]["kernel_type"], (titles or {}).get(group[0]["kernel_type"], ""))
        lines += ["", f"## {kernel} ({group[0]['tag']}, {numbers})", "",
                  "| exp | status | correctness | latency (us) | speedup vs PyTorch | tokens | description |",
                  "| ---: | --- | --- | ---: | ---: | ---: | --- |"]
        for row in group:
            description = (row["description"] or "").replace("|", "\\|")
            lines.append(f"| {row['experiment']} | {row['status']} | {row['correctness']} | "
                         f"{_number(row['latency_us'], 1)} | {format_speedup(row['speedup_vs_pytorch'])} | "
                         f"{row['llm_tokens'] or 0} | {description} |")
    return "\n".join(lines)
