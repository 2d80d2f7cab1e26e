"""The run's log on disk: workspace/runs/<tag>.jsonl, one JSON line per experiment, everything the terminal showed.

results.tsv holds each experiment's figures and a short reason (results.short_reason); this log holds the
rest, which the terminal showed once and state.json forgets when the job ends: the judge's whole
error, the agent's hypothesis, the candidate as a diff against the version it was judged against,
the tokens and the cost. It sits beside state.json in the workspace (git-ignored, kept across the
run's branch switches), one file per run tag. A line is appended, flushed and fsynced right after
the experiment's results.tsv row; a kill between the two can cost the log that one line, never the
row. A resumed run appends to the same file; readers take the last line of an experiment number.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from pathlib import Path

from autokernel.core import paths
from autokernel.core.contracts import BenchResult

RUNS_DIR = "runs"              # under the workspace


def log_path(tag: str) -> Path:
    return paths.WORKSPACE / RUNS_DIR / f"{tag}.jsonl"


def diff(before: str | None, after: str | None) -> str | None:
    """The candidate as a unified diff of kernel.py against the version it was judged against (None without both)."""
    if before is None or after is None:
        return None
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        "a/kernel.py", "b/kernel.py"))


def entry(row: dict, *, job: str, bench: BenchResult, hypothesis: str = "", diff_text: str | None = None,
          tokens_in: int = 0, tokens_out: int = 0) -> dict:
    """One experiment's line: its results.tsv row's figures, and what the row has no room for."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "experiment": row["experiment"],
            "tag": row["tag"], "job": job, "kernel_type": row["kernel_type"], "status": row["status"],
            "correctness": bench.correctness, "failed_stage": bench.failed_stage, "reason": row.get("reason") or "",
            "error": None if bench.passed else bench.message, "description": row["description"],
            "hypothesis": hypothesis, "diff": diff_text, "latency_us": bench.latency_us,
            "speedup_vs_pytorch": bench.speedup_vs_pytorch, "gpu": row.get("gpu"),
            "wall_seconds": row.get("wall_seconds"),
            "tokens": {"in": tokens_in, "out": tokens_out, "cached": row.get("llm_cached_tokens") or 0,
                       "reasoning": row.get("llm_reasoning_tokens") or 0},
            "cost_usd": row.get("cost_usd")}


def append(tag: str, line: dict) -> None:
    """Append one experiment's line to the run's log, flushed and fsynced."""
    path = log_path(tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(line) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read(tag: str) -> list[dict]:
    """The run's experiments as logged, one per number (a resumed run's last line of a number wins); [] for none.
    A line a kill cut short is skipped."""
    path = log_path(tag)
    if not path.is_file():
        return []
    by_number: dict[int, dict] = {}
    for text in path.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("experiment"), int):
            by_number[line["experiment"]] = line
    return [by_number[number] for number in sorted(by_number)]
