"""Scores a folder of problem files the way KernelBench scores its levels: fast_p, against eager and torch.compile.

    autokernel score DIR [--budget-per-problem 0] [--top 1] [--dtype float16] [--no-compile] [--json-out FILE]
                         [--state FILE] [--gpus N] [--jobs N] [--stop-after DURATION] [--problem-timeout DURATION]
                         [--problems NAME,NAME...] [--reports DIR] [--overhead]

Each problem file (KernelBench's convention: `class Model`, `get_inputs()`, `get_init_inputs()`)
goes through what a user would run, each step in a child process so that one problem's crash or
hang costs only its row:
  1. with a budget, `autokernel optimize FILE --budget B --top N --agent builtin` (its kernels are
     then read from the run's branch); without one, the starter kernels at the problem's shapes;
  2. `autokernel verify FILE --starters` (or `--optimized-dir` of the run), which checks the output and
     times PyTorch eager, torch.compile and CUDA graphs, each with and without our kernels.
A problem is correct when verify's error check passes. Its speedups are those of the path verify's verdict hands
over: AutoKernel's best where it is faster than PyTorch's best, by no more than the verdict claims (the speedup
timed in turn); else PyTorch's best, which counts against eager as it is and against torch.compile as 1.0 (a PyTorch
path is no gain of ours). fast_p is the fraction of problems correct and faster than the baseline by more than p.
Without a GPU there is no speed verdict and every time is the interpreter's: the table says so.

`--state FILE` appends each problem's score to FILE as it is done and skips the problems FILE already has, so a run
cut off (or stopped by `--stop-after`, which starts no problem after that long) goes on with the same command;
`--gpus N` scores N problems side by side, each on its own GPU, each optimized in a git repository of its own;
`--jobs J` runs J problems side by side on each GPU, their timings taking turns (the GPU's timing lock,
autokernel/core/gpu_lock.py). `--reports DIR` keeps each problem's whole verify report as DIR/<problem>.json, and
`--overhead` has verify measure the routing's own cost as well.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

from autokernel.core import gpu_lock, paths
from autokernel.verify.report_record import VerifyReport

THRESHOLDS = (1.0, 1.5, 2.0)
# Each step is the user's own command in a process of its own: `autokernel optimize`, then verify.
OPTIMIZE_MODULE = "autokernel.cli"
VERIFY_MODULE = "autokernel.verify.verify_command"
NOTHING_TO_PLUG_IN = 3       # verify.py's exit code when no kernel type covers the model (EXIT_NOTHING_TO_PLUG_IN)
# verify.py's exit codes that come with a verdict: passed, failed, nothing to plug in, nothing checked, passed with
# parts dropped.
VERDICT_EXITS = (0, 1, NOTHING_TO_PLUG_IN, 4, 5)
TAIL_LINES = 15
PROBLEM_TIMEOUT_S = 900
VERIFY_LIMIT_MARGIN_S = 30      # of a problem's limit, kept for verify's own start and end around its --time-limit


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
    speedup_vs_max_autotune: float | None = None   # with --max-autotune: shown, not in fast_p
    error_tail: list[str] = field(default_factory=list)   # the failing step's last lines of stderr (where it failed)
    dropped: list[str] = field(default_factory=list)      # the parts verify dropped for failures, each with its reason

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ProblemScore:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def read_state(path: Path | None) -> list[ProblemScore]:
    """The problems a scoring run already scored (--state FILE: one JSON line per problem)."""
    if path is None or not path.is_file():
        return []
    rows = [ProblemScore.from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return list({row.problem: row for row in rows}.values())


def _append_state(path: Path | None, score: ProblemScore) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(score.to_json()) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def problem_files(folder: Path) -> list[Path]:
    """The KernelBench-convention files in a folder (a Model class and get_inputs), by name."""
    files = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    return [p for p in files if "class Model" in (text := p.read_text()) and "def get_inputs" in text]


def _best(variants: dict, names: tuple[str, ...]) -> float | None:
    times = [variants[name]["ms"] for name in names if variants.get(name, {}).get("ms")
             and variants[name]["error"] is not None]
    return min(times, default=None)


def score_report(name: str, report: VerifyReport, seconds: float) -> ProblemScore:
    """A problem's score from verify's report: the path its verdict hands over, against each baseline."""
    variants, verdict = report.variants, report.verdict
    eager, compiled = _best(variants, ("eager",)), _best(variants, ("compile", "cudagraphs"))
    strongest = _best(variants, ("max_autotune",))
    pytorch_ms = (verdict.pytorch_best or {}).get("ms")
    ours_ms = (verdict.autokernel_best or {}).get("ms") if verdict.faster else None
    # The verdict may claim less than its two figures' ratio (the speedup timed in turn, endtoend.choose): every
    # baseline gets the same discount.
    discount = verdict.speedup * ours_ms / pytorch_ms if ours_ms and pytorch_ms and verdict.speedup else 1.0

    def against(baseline: float | None, ours_only: bool) -> float | None:
        if not baseline:
            return None
        if ours_ms:
            return baseline / ours_ms * discount
        # PyTorch's own path is handed over: against eager it is what the user gains; against torch.compile (a
        # PyTorch path faster still is no gain of ours) and max-autotune, 1.0 at most
        return 1.0 if ours_only or not pytorch_ms else baseline / pytorch_ms
    return ProblemScore(
        problem=name, correct=report.passed, speedup_vs_eager=against(eager, False),
        speedup_vs_compile=against(compiled, True), speedup_vs_max_autotune=against(strongest, True),
        verdict=verdict.summary, timings_meaningful=report.timings_meaningful, seconds=seconds,
        dropped=[f"{d['stage']}: {d['unit']}: {d['reason']}" for d in report.dropped])


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


@dataclass
class ScoringRun:
    """How a folder is scored: with a budget or the starters; where; on how many GPUs; for how long."""
    budget: str | None
    top: int
    extra_args: list[str]
    compile_enabled: bool
    workdir: Path | None = None
    state: Path | None = None            # one JSON line per scored problem: a run cut off goes on from there
    gpus: int = 1                        # problems judged side by side, one per GPU (CUDA_VISIBLE_DEVICES)
    jobs: int = 1                        # problems side by side on each GPU, their timings taking turns
    stop_after_s: float | None = None    # no problem starts after this long (a device call's limit)
    problem_timeout_s: float = PROBLEM_TIMEOUT_S
    reports: Path | None = None          # where each problem's verify report is kept, as <problem>.json
    verify_args: list[str] = field(default_factory=list)   # verify's own options (--overhead)


def score_folder(folder: Path, *, budget: str | None, top: int, extra_args: list[str], compile_enabled: bool,
                 log: Callable[[str], None], workdir: Path | None = None, state: Path | None = None, gpus: int = 1,
                 stop_after_s: float | None = None, problem_timeout_s: float = PROBLEM_TIMEOUT_S,
                 only: list[str] | None = None, reports: Path | None = None,
                 verify_args: list[str] | None = None, jobs: int = 1) -> list[ProblemScore]:
    """Optimize (with a budget) and verify every problem file of the folder not already in `state`, one child
    process per step, `gpus` x `jobs` problems at a time (`jobs` on each GPU); returns every problem's score so
    far."""
    run = ScoringRun(budget, top, extra_args, compile_enabled, Path(workdir or tempfile.mkdtemp(
        prefix="autokernel-score-")), state, gpus, jobs, stop_after_s, problem_timeout_s, reports,
        list(verify_args or ()))
    files = [file for file in problem_files(folder) if only is None or file.stem in only]
    unknown = sorted(set(only or ()) - {file.stem for file in files})
    if unknown:
        raise ValueError(f"no problem files named {', '.join(unknown)} in {folder}")
    done = [row for row in read_state(state) if row.problem in {file.stem for file in files}]
    scored = {row.problem for row in done}
    pending = [file for file in files if file.stem not in scored]
    if done:
        log(f"{len(done)} problems scored before (in {state}); {len(pending)} to go")
    started, lock, scores = time.monotonic(), threading.Lock(), list(done)

    def worker(slot: int) -> None:
        gpu = slot % max(1, run.gpus)
        while True:
            with lock:
                if not pending or (run.stop_after_s is not None and time.monotonic() - started > run.stop_after_s):
                    return
                file = pending.pop(0)
            score = score_problem(file, run, log, gpu)
            with lock:
                scores.append(score)
                _append_state(run.state, score)
                log(f"   {_row(score)}")

    threads = [threading.Thread(target=worker, args=(slot,), daemon=True)
               for slot in range(max(1, run.gpus) * max(1, run.jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if pending:
        log(f"stopped after {run.stop_after_s:.0f} s with {len(pending)} problems left: run again with --state "
            f"{state} to go on" if state else f"stopped with {len(pending)} problems left")
    order = [file.stem for file in files]
    return sorted(scores, key=lambda row: order.index(row.problem) if row.problem in order else len(order))


def score_problem(file: Path, run: ScoringRun, log: Callable[[str], None], gpu: int = 0) -> ProblemScore:
    """One problem: optimized in a git repository of its own (with a budget), then verified; on GPU `gpu`."""
    started = time.monotonic()
    log(f"== {file.name}" + (f" (GPU {gpu})" if run.gpus > 1 else ""))
    env = _environment(run, gpu)
    workspace, optimized = run.workdir / file.stem, None
    try:
        optimized = _optimize(file, run, log, workspace, env) if run.budget else None
        report, planned = _verify(file, workspace, optimized, run, env)
        seconds = time.monotonic() - started
        if report is None:
            return unplanned_score(file.stem, seconds)
        row = score_report(file.stem, report, seconds)
        if not planned:      # no kernel type covers it: PyTorch's own paths were still timed, and the verdict stands
            row.verdict = f"not planned: no kernel type covers it; {row.verdict}"
        return row
    except _ProblemFailed as failure:
        if run.reports is not None:       # what a GPU run needs to find the cause, beside the other reports
            run.reports.mkdir(parents=True, exist_ok=True)
            (run.reports / f"{file.stem}.error.txt").write_text(f"{failure}\n\n" + "\n".join(failure.tail) + "\n")
        return ProblemScore(file.stem, False, None, None, "not scored", None, time.monotonic() - started,
                            error=str(failure), error_tail=failure.tail)
    finally:
        if optimized is not None:
            _drop_worktree(optimized)


class _ProblemFailed(Exception):
    """One problem could not be optimized or verified; its row says why, with the step's last lines of output."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.tail = _tail_lines(output)


def _run(cmd: list[str], what: str, run: ScoringRun, env: dict | None, cwd: Path | None = None
         ) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, cwd=cwd or paths.ROOT, capture_output=True, text=True,
                              timeout=run.problem_timeout_s, env=paths.module_environment(env))
    except subprocess.TimeoutExpired as exc:
        raise _ProblemFailed(f"{what} ran past {run.problem_timeout_s:.0f} s") from exc
    return proc


_GIT = ["git", "-c", "user.name=autokernel score", "-c", "user.email=score@autokernel.invalid"]


def _optimize(file: Path, run: ScoringRun, log, workspace: Path, env: dict | None) -> Path:
    """Run the loop on the problem in a git repository of its own (problems side by side never share a tree);
    the folder verify reads: optimized_kernels/ in the worktree of the run's branch, or, where the run saved no
    kernel (none was correct), a manifest of no kernels, so the problem is scored as the user has it then:
    PyTorch's own paths, timed."""
    repo = workspace / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    for step in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", f"score {file.stem}"]):
        subprocess.run([*_GIT, *step], cwd=repo, capture_output=True, check=True)
    tag = f"score-{file.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    proc = _run(paths.module_command(OPTIMIZE_MODULE, "optimize", "--workdir", str(repo), str(file.resolve()),
                                     "--budget", run.budget, "--top", str(run.top), "--agent", "builtin", "--tag", tag,
                                     *run.extra_args),
                "the optimization", run, env, cwd=repo)
    if proc.returncode != 0:
        raise _ProblemFailed(f"autokernel optimize exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}",
                             proc.stderr or proc.stdout)
    worktree = workspace / "run"
    shutil.rmtree(worktree, ignore_errors=True)
    added = subprocess.run([*_GIT, "worktree", "add", "--detach", str(worktree), f"autokernel/{tag}"],
                           cwd=repo, capture_output=True, text=True)
    if added.returncode != 0:
        raise _ProblemFailed(f"cannot check out the run's branch autokernel/{tag}: {_tail(added.stderr)}",
                             added.stderr)
    kept = worktree / paths.OPTIMIZED_DIR_NAME
    if (kept / paths.MANIFEST_NAME).is_file():
        return kept
    log(f"   {file.stem}: the run saved no kernel (none was correct); verified as PyTorch's own paths")
    nothing = worktree / "kept_nothing"
    nothing.mkdir()
    (nothing / paths.MANIFEST_NAME).write_text(json.dumps({"kernels": {}}))
    return nothing


def _drop_worktree(optimized_dir: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(optimized_dir.parent)],
                   cwd=optimized_dir.parent.parent / "repo", capture_output=True)


def _verify(file: Path, workspace: Path, optimized: Path | None, run: ScoringRun, env: dict | None
            ) -> tuple[VerifyReport | None, bool]:
    """verify's report (None where it wrote none because nothing covers the problem), and whether anything did."""
    kernels = ["--optimized-dir", str(optimized)] if optimized else ["--starters"]
    # Asked to end inside the problem's limit with a verdict (some routes left unchecked), not to be killed at it.
    limit = ["--time-limit", f"{max(run.problem_timeout_s - VERIFY_LIMIT_MARGIN_S, 1):.0f}"]
    cmd = paths.module_command(VERIFY_MODULE, str(file), *kernels, "--workspace", str(workspace), *limit,
                               *run.extra_args, *run.verify_args, *([] if run.compile_enabled else ["--no-compile"]))
    proc = _run(cmd, "verify", run, env)
    report_file = workspace / "verify_report.json"
    planned = proc.returncode != NOTHING_TO_PLUG_IN
    if not planned and not report_file.is_file():
        return None, planned
    if proc.returncode not in VERDICT_EXITS or not report_file.is_file():
        raise _ProblemFailed(f"verify exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}",
                             proc.stderr or proc.stdout)
    if run.reports is not None:
        run.reports.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(report_file, run.reports / f"{file.stem}.json")
    try:
        return VerifyReport.from_json(json.loads(report_file.read_text())), planned
    except ValueError as error:        # not JSON, or not a report (a ContractError)
        raise _ProblemFailed(f"verify wrote a report that is not one: {error}") from error


def _environment(run: ScoringRun, gpu: int) -> dict | None:
    """The steps' environment: their GPU, and its timing lock where problems share it (None: this process's own)."""
    env = {}
    if run.gpus > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if run.jobs > 1:
        (lock := run.workdir / f"gpu{gpu}_timing.lock").parent.mkdir(parents=True, exist_ok=True)
        lock.touch()
        env[gpu_lock.TIMING_LOCK_VARIABLE] = str(lock)
        if gpu_lock.COMPILE_THREADS_VARIABLE not in os.environ:      # as the zoo's gate: a share of the CPUs each
            env[gpu_lock.COMPILE_THREADS_VARIABLE] = gpu_lock.compile_threads(run.jobs * max(1, run.gpus))
    return {**os.environ, **env} if env else None


def _tail(text: str) -> str:
    return (_tail_lines(text, 1) or ["(no output)"])[0][:300]


def _tail_lines(text: str, count: int = TAIL_LINES) -> list[str]:
    """The last lines of a step's output that say something: a traceback's end, not compiler warnings."""
    lines = [line.rstrip() for line in (text or "").strip().splitlines() if line.strip()]
    return [line[:500] for line in lines[-count:]]


def _row(score: ProblemScore) -> str:
    if score.error:
        return f"{score.problem}: not scored: {score.error}"
    speed = " ".join(f"{name} {value:.2f}x" for name, value in (("vs eager", score.speedup_vs_eager),
                                                                ("vs compile", score.speedup_vs_compile)) if value)
    return f"{score.problem}: {'correct' if score.correct else 'WRONG'}, {speed or 'not timed'}; {score.verdict}"


def format_table(scores: list[ProblemScore]) -> str:
    """Markdown: one row per problem, then the fast_p summary against eager and against torch.compile."""
    strongest = any(s.speedup_vs_max_autotune is not None for s in scores)
    lines = ["| problem | correct | vs eager | vs torch.compile |" + (" vs max-autotune |" if strongest else "")
             + " verdict |", "| --- | --- | --- | --- |" + (" --- |" if strongest else "") + " --- |"]
    for s in scores:
        said = s.error or s.verdict + "".join(f"; dropped {part}" for part in s.dropped)
        lines.append(f"| {s.problem} | {'yes' if s.correct else 'no'} | {_x(s.speedup_vs_eager)} | "
                     f"{_x(s.speedup_vs_compile)} |" + (f" {_x(s.speedup_vs_max_autotune)} |" if strongest else "")
                     + f" {said.replace('|', '/')} |")
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
