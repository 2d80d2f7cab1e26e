"""Scores a folder of problem files the way KernelBench scores its levels: fast_p, against eager and torch.compile.

    autokernel score DIR [--budget-per-problem 0] [--top 1] [--dtype float16] [--no-compile] [--json-out FILE]

Each problem file (KernelBench's convention: `class Model`, `get_inputs()`, `get_init_inputs()`)
goes through what a user would run, each step in a child process so that one problem's crash or
hang costs only its row:
  1. with a budget, `autokernel optimize FILE --budget B --top N --agent builtin` (its kernels are
     then read from the run's branch); without one, the starter kernels at the problem's shapes;
  2. `verify.py FILE --starters` (or `--optimized-dir` of the run), which checks the output and
     times PyTorch eager, torch.compile and CUDA graphs, each with and without our kernels.
A problem is correct when verify's error check passes. Its speedup against eager is eager's time
over AutoKernel's best variant's; against torch.compile, torch.compile's over AutoKernel's best
compiled variant. Where nothing was routed, AutoKernel's best is PyTorch's own path: 1.0.
fast_p is the fraction of problems that are correct and faster than the baseline by more than p;
fast_1 is "correct and faster". Without a GPU every time is the interpreter's: the table says so.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from autokernel import paths

THRESHOLDS = (1.0, 1.5, 2.0)
NOTHING_TO_PLUG_IN = 3       # verify.py's exit code when no kernel type covers the model (EXIT_NOTHING_TO_PLUG_IN)
PROBLEM_TIMEOUT_S = 900


@dataclass
class ProblemScore:
    problem: str
    correct: bool
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    verdict: str
    timings_meaningful: bool | None      # None: nothing was timed
    seconds: float
    error: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def problem_files(folder: Path) -> list[Path]:
    """The KernelBench-convention files in a folder (a Model class and get_inputs), by name."""
    files = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    return [p for p in files if "class Model" in (text := p.read_text()) and "def get_inputs" in text]


def _best(variants: dict, names: tuple[str, ...]) -> float | None:
    times = [variants[name]["ms"] for name in names if variants.get(name, {}).get("ms")
             and variants[name]["error"] is not None]
    return min(times, default=None)


def score_report(name: str, report: dict, seconds: float) -> ProblemScore:
    """A problem's score from verify's report."""
    variants = report["variants"]
    allowed = report["correctness"]["tolerance"]
    correct_ours = {n: v for n, v in variants.items() if v["variant"].startswith("ours") and v["ms"]
                    and v["error"] is not None and v["error"] <= allowed}
    eager, compiled = _best(variants, ("eager",)), _best(variants, ("compile", "cudagraphs"))
    ours_any = min((v["ms"] for v in correct_ours.values()), default=None)
    ours_compiled = min((v["ms"] for n, v in correct_ours.items() if n != "ours"), default=None)
    return ProblemScore(
        problem=name, correct=report["correctness"]["passed"],
        speedup_vs_eager=(eager / ours_any if ours_any else 1.0) if eager else None,
        speedup_vs_compile=(compiled / ours_compiled if ours_compiled else 1.0) if compiled else None,
        verdict=report["verdict"]["summary"], timings_meaningful=report["timings_meaningful"], seconds=seconds)


def unplanned_score(name: str, seconds: float) -> ProblemScore:
    """A problem no kernel type covers: the user keeps PyTorch's own path, correct and 1.0x, with nothing timed."""
    return ProblemScore(problem=name, correct=True, speedup_vs_eager=1.0, speedup_vs_compile=1.0,
                        verdict="not planned: no kernel type covers it; PyTorch's own path, unchanged",
                        timings_meaningful=None, seconds=seconds)


def fast_p(scores: list[ProblemScore], baseline: str, threshold: float) -> float:
    """The fraction of problems correct and faster than the baseline ("eager" or "compile") by more than threshold."""
    if not scores:
        return 0.0
    key = f"speedup_vs_{baseline}"
    return sum(1 for s in scores if s.correct and (getattr(s, key) or 0.0) > threshold) / len(scores)


def geometric_mean(scores: list[ProblemScore], baseline: str) -> float | None:
    values = [getattr(s, f"speedup_vs_{baseline}") for s in scores if s.correct]
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(scores: list[ProblemScore]) -> dict:
    table = {"problems": len(scores), "correct": sum(s.correct for s in scores) / len(scores) if scores else 0.0,
             # A problem with nothing timed (unplanned, or failed before timing) says nothing of the clock.
             "timings_meaningful": all(s.timings_meaningful for s in scores if s.timings_meaningful is not None)}
    for baseline in ("eager", "compile"):
        table[baseline] = {**{f"fast_{t:g}": fast_p(scores, baseline, t) for t in THRESHOLDS},
                           "geomean_speedup": geometric_mean(scores, baseline)}
    return table


def score_folder(folder: Path, *, budget: str | None, top: int, extra_args: list[str], compile_enabled: bool,
                 log: Callable[[str], None], workdir: Path | None = None) -> list[ProblemScore]:
    """Optimize (with a budget) and verify every problem file of the folder, one child process per step."""
    scores = []
    root = Path(workdir or tempfile.mkdtemp(prefix="autokernel-score-"))
    for file in problem_files(folder):
        started = time.monotonic()
        log(f"== {file.name}")
        workspace, optimized = root / file.stem, None
        try:
            optimized = _optimize(file, budget, top, extra_args, log) if budget else None
            report = _verify(file, workspace, optimized, extra_args, compile_enabled)
            seconds = time.monotonic() - started
            scores.append(score_report(file.stem, report, seconds) if report is not None
                          else unplanned_score(file.stem, seconds))
        except _ProblemFailed as failure:
            scores.append(ProblemScore(file.stem, False, None, None, "not scored", None,
                                       time.monotonic() - started, error=str(failure)))
        finally:
            if optimized is not None:
                _drop_worktree(optimized)
        log(f"   {_row(scores[-1])}")
    return scores


class _ProblemFailed(Exception):
    """One problem could not be optimized or verified; its row says why."""


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, text=True, timeout=PROBLEM_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise _ProblemFailed(f"{what} ran past {PROBLEM_TIMEOUT_S} s") from exc
    return proc


def _optimize(file: Path, budget: str, top: int, extra_args: list[str], log) -> Path:
    """Run the loop on the problem; the worktree of its branch, where optimized_kernels/ is."""
    tag = f"score-{file.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    proc = _run([sys.executable, str(paths.script("orchestrate.py")), str(file), "--budget", budget, "--top", str(top),
                 "--agent", "builtin", "--tag", tag, *extra_args], "the optimization")
    if proc.returncode != 0:
        raise _ProblemFailed(f"autokernel optimize exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
    worktree = Path(tempfile.mkdtemp(prefix=f"autokernel-{file.stem}-"))
    shutil.rmtree(worktree)
    added = subprocess.run(["git", "worktree", "add", "--detach", str(worktree), f"autokernel/{tag}"],
                           cwd=paths.ROOT, capture_output=True, text=True)
    if added.returncode != 0:
        raise _ProblemFailed(f"cannot check out the run's branch autokernel/{tag}: {_tail(added.stderr)}")
    return worktree / "optimized_kernels"


def _drop_worktree(optimized_dir: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(optimized_dir.parent)], cwd=paths.ROOT,
                   capture_output=True)


def _verify(file: Path, workspace: Path, optimized: Path | None, extra_args: list[str],
            compile_enabled: bool) -> dict:
    kernels = ["--optimized-dir", str(optimized)] if optimized else ["--starters"]
    cmd = [sys.executable, str(paths.script("verify.py")), str(file), *kernels, "--workspace", str(workspace),
           *extra_args, *([] if compile_enabled else ["--no-compile"])]
    proc = _run(cmd, "verify")
    if proc.returncode == NOTHING_TO_PLUG_IN:
        return None
    report_file = workspace / "verify_report.json"
    if proc.returncode not in (0, 1) or not report_file.is_file():
        raise _ProblemFailed(f"verify exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}")
    return json.loads(report_file.read_text())


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _row(score: ProblemScore) -> str:
    if score.error:
        return f"{score.problem}: not scored: {score.error}"
    speed = " ".join(f"{name} {value:.2f}x" for name, value in (("vs eager", score.speedup_vs_eager),
                                                                ("vs compile", score.speedup_vs_compile)) if value)
    return f"{score.problem}: {'correct' if score.correct else 'WRONG'}, {speed or 'not timed'}; {score.verdict}"


def format_table(scores: list[ProblemScore]) -> str:
    """Markdown: one row per problem, then the fast_p summary against eager and against torch.compile."""
    lines = ["| problem | correct | vs eager | vs torch.compile | verdict |", "| --- | --- | --- | --- | --- |"]
    for s in scores:
        lines.append(f"| {s.problem} | {'yes' if s.correct else 'no'} | {_x(s.speedup_vs_eager)} | "
                     f"{_x(s.speedup_vs_compile)} | {s.error or s.verdict} |")
    table = summary(scores)
    lines += ["", f"{table['problems']} problems, {table['correct']:.0%} correct.", "",
              "| baseline | fast_1 | fast_1.5 | fast_2 | geometric mean speedup |", "| --- | --- | --- | --- | --- |"]
    for baseline in ("eager", "compile"):
        row = table[baseline]
        lines.append(f"| {baseline} | {row['fast_1']:.0%} | {row['fast_1.5']:.0%} | {row['fast_2']:.0%} | "
                     f"{_x(row['geomean_speedup'])} |")
    if not table["timings_meaningful"]:
        lines.append("\nCPU interpreter: the speedups are NOT MEANINGFUL (no GPU).")
    return "\n".join(lines)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
