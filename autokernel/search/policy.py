"""The loop's rules: when a candidate is kept, how noisy the timings are, and when a kernel is done.

The noise rule: the two baseline runs give latencies a and b; noise = |a - b| / min(a, b), never
below the noise floor. A candidate is kept when best_latency / candidate_latency > 1 + noise, so a
change that timing jitter alone could explain is not kept. A kernel is done after that many reverts
in a row (an unreadable reply is not one: those have their own limit), after its time on it, at the target speedup over its baseline, or at the target fraction
of the hardware peak (the run's budget and cost cap are checked by the loop itself).
"""

from __future__ import annotations

from dataclasses import replace

from autokernel.core.contracts import (NO_GAIN, SPEED_UNKNOWN, STATUS_REVERT, WINNER, BenchResult, JudgedResult,
                                       RunSettings, titled)
from autokernel.core.run_records import JobProgress
from autokernel.core.live import format_duration, plural, printable_line

DESCRIPTION_CHARS = 200


def is_improvement(result: BenchResult | JudgedResult, best: JudgedResult, noise: float) -> bool:
    """The keep rule: a PASS whose latency beats the best by more than the noise."""
    latency, best_latency = result.latency_us, best.latency_us
    if not result.passed or not latency or not best_latency:
        return False
    return best_latency / latency > 1 + noise


def against_pytorch_best(result: BenchResult, compile_us: dict[str, float], noise: float) -> JudgedResult:
    """The result with PyTorch's best beside ours, shape by shape: the faster of eager and torch.compile.

    Eager is timed in every bench run; torch.compile only in the job's first baseline run
    (`compile_us`, call time per shape string), because compiling the reference in every experiment
    would cost each one tens of seconds. For a PASS with timings: each timing row gets its
    `compile_latency_us` (where missing) and `pytorch_best_us`, the result its `speedup_vs_compile`
    (where missing), and the judged result `speedup_vs_best` and `wins_at`, the shapes where ours beats
    PyTorch's best by more than the noise: the only shapes a kernel is a winner at.
    """
    rows = result.timings
    if not result.passed or not rows:
        return JudgedResult(result)
    filled = []
    for row in rows:
        compiled = row.get("compile_latency_us") or compile_us.get(row.get("shape"))
        best = min((t for t in (row.get("pytorch_latency_us"), compiled) if t), default=None)
        filled.append({**row, "compile_latency_us": compiled, "pytorch_best_us": best})
    ours = sum(row.get("latency_us") or 0.0 for row in filled)
    bench = replace(result, timings=filled)
    if ours <= 0:
        return JudgedResult(bench)
    if not bench.speedup_vs_compile and all(row["compile_latency_us"] for row in filled):
        bench = replace(bench, speedup_vs_compile=sum(row["compile_latency_us"] for row in filled) / ours)
    speedup_vs_best = (sum(row["pytorch_best_us"] for row in filled) / ours
                       if all(row["pytorch_best_us"] for row in filled) else None)
    wins_at = [row["shape"] for row in filled if row["pytorch_best_us"] and row.get("latency_us")
               and row["pytorch_best_us"] / row["latency_us"] > 1 + noise]
    return JudgedResult(bench, speedup_vs_best=speedup_vs_best, wins_at=wins_at)


def compile_times(result: BenchResult) -> dict[str, float]:
    """torch.compile's call time per shape string, from a bench run made with --compare-compile."""
    return {row["shape"]: row["compile_latency_us"] for row in result.timings
            if row.get("shape") and row.get("compile_latency_us")}


def verdict(result: JudgedResult) -> str:
    """How a job's best ends: WINNER when it beats PyTorch's best at one of the job's shapes at least,
    NO_GAIN when at none. Without meaningful timings (the CPU interpreter) nothing can be compared, so it
    is never a winner: SPEED_UNKNOWN, correct and no more."""
    if not result.bench.timings_meaningful:
        return SPEED_UNKNOWN
    return WINNER if result.wins_at else NO_GAIN


def is_saved(result: JudgedResult) -> bool:
    """Whether a job's best goes to optimized_kernels/: whenever it is correct, a winner or not. The judge sets it
    against PyTorch's op alone; in the model Inductor may take another path for that op (session 18, H200:
    matmul_tall_skinny's GEMM took 248 us compiled in the model, 133 us ours, where alone it had no gain), and
    verify, which routes a kernel only where the model gets faster with it, is the one to tell. On CPU it is
    saved so that the pipeline (verify, plug_in) can be tried without a GPU."""
    return result.bench.passed


def measured_noise(first: BenchResult, second: BenchResult, floor: float) -> float:
    a, b = first.latency_us, second.latency_us
    if not a or not b:
        return floor
    return max(floor, abs(a - b) / min(a, b))


def baseline_verdict(runs: list[BenchResult], noise_floor: float) -> tuple[JudgedResult, bool, float, dict[str, float]]:
    """A job's baseline from its starter's bench runs (the second made only after a PASS): the faster run
    (candidates must beat what the starter can do, not its bad luck) or the failing one; whether it
    passed; the noise between the runs; torch.compile's call times, which the first run measured."""
    noise = measured_noise(runs[0], runs[-1], noise_floor)
    compile_us = compile_times(runs[0])
    judged = [against_pytorch_best(run, compile_us, noise) for run in runs]
    failure = next((run for run in judged if not run.passed), None)
    baseline = failure or min(judged, key=lambda run: run.latency_us or float("inf"))
    return baseline, failure is None, noise, compile_us


def keep_note(result: JudgedResult, previous: JudgedResult) -> str:
    """What a kept row adds to its description when its speedup against PyTorch eager is below the previous keep's:
    keeps go by our latency, and eager is timed afresh in every bench, so its own jitter can lower the ratio."""
    ours, before = result.bench.speedup_vs_pytorch, previous.bench.speedup_vs_pytorch
    if ours is None or before is None or ours >= before:
        return ""
    def us(value) -> str:
        return "-" if value is None else f"{value:.1f} us"
    return (f" [kept for its latency, {us(result.latency_us)} against the best's "
            f"{us(previous.latency_us)}; its speedup vs PyTorch is lower because PyTorch eager timed "
            f"{us(result.bench.pytorch_latency_us)} in this bench, {us(previous.bench.pytorch_latency_us)} in the "
            f"best's]")


def history_entry(number: int, description: str, status: str, result: JudgedResult, *,
                  against: JudgedResult | None = None,
                  noise: float = 0.0, hypothesis: str = "", reason: str | None = None) -> dict:
    """What the agent is shown of one experiment of its kernel: the judge's figures, its latency's ratio to
    the best it was judged against, the keep threshold it had to beat, why it was reverted, its hypothesis."""
    best = against.latency_us if against is not None else None
    latency = result.latency_us if result.passed else None
    return {"experiment": number, "description": description, "status": status,
            **{key: getattr(result.bench, key) for key in ("correctness", "throughput", "latency_us",
                                                           "speedup_vs_pytorch", "message")},
            "ratio_to_best": latency / best if latency and best else None,
            "threshold_us": best / (1 + noise) if best else None,
            "reason": reason if reason is not None else verdict_reason(status, result, best, noise),
            "hypothesis": hypothesis}


def verdict_reason(status: str, result: JudgedResult, best_us: float | None, noise: float) -> str:
    """Why a verdict went as it did, in a few words: kept, or what made it a revert."""
    if status != STATUS_REVERT:
        return status
    bench = result.bench
    if not bench.passed:
        return f"{bench.correctness} at {bench.failed_stage or 'an unknown stage'}: " \
               f"{one_line(bench.message or '', 100)}"
    latency = bench.latency_us
    if not latency or not best_us:
        return "no timing to compare"
    if latency >= best_us:
        return f"slower than the best ({latency:.4g} us against {best_us:.4g} us)"
    return (f"{best_us / latency - 1:.1%} faster, inside the noise ({noise:.1%}): needed below "
            f"{best_us / (1 + noise):.4g} us")


def older_entry(entry: dict) -> dict:
    """What is kept of a history row once it leaves the window the state keeps: a summary line's worth."""
    return {"experiment": entry.get("experiment"), "status": entry.get("status"),
            "reason": one_line(entry.get("reason") or "", 100), "description": one_line(entry.get("description", ""))}


def one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    return printable_line(text)[:limit] or "(no description)"


def job_stop_reason(progress: JobProgress, settings: RunSettings) -> str | None:
    """Why the current kernel is done, or None to go on."""
    if progress.consecutive_reverts >= settings.max_consecutive_reverts:
        return f"{progress.consecutive_reverts} reverts in a row"
    if progress.malformed_in_a_row >= settings.max_malformed:
        return f"{progress.malformed_in_a_row} unreadable replies in a row (each asked again once)"
    if progress.elapsed_s >= settings.kernel_time_s:
        return f"{format_duration(progress.elapsed_s)} spent on this kernel"
    gain = progress.gain()
    if gain is not None and gain >= settings.target_speedup:
        return f"{gain:.2f}x over its baseline"
    pct_peak = progress.best.bench.pct_peak
    if pct_peak is not None and pct_peak >= settings.peak_fraction_target * 100:
        return f"{pct_peak:.0f}% of the hardware peak"
    return None


def outcome(progress: JobProgress, reason: str, *, source_commit: str, tag: str) -> dict:
    """A kernel's result, as its optimized_kernels/manifest.json entry records it (beside plugin's fields)."""
    baseline, best = progress.baseline, progress.best
    return {"baseline_latency_us": baseline.latency_us,
            "best_latency_us": best.latency_us,
            "speedup_over_baseline": round(progress.gain() or 1.0, 4),
            "baseline_speedup_vs_pytorch": baseline.bench.speedup_vs_pytorch,
            "best_speedup_vs_pytorch": best.bench.speedup_vs_pytorch,
            "best_speedup_vs_pytorch_best": best.speedup_vs_best,
            "wins_at": best.wins_at,
            "timings_meaningful": best.bench.timings_meaningful,
            "experiments": progress.experiments, "stopped_because": reason,
            "source_commit": source_commit, "tag": tag}


def describe_ending(name: str, progress: JobProgress, reason: str, *, final: bool, title: str = "") -> str:
    """The log line for a job that ends (or stops with the run): a winner, its speed unknown (CPU), or "no gain"
    alone (saved all the same, is_saved). title: what a region job computes, said before its name (Job.label)."""
    gain, best = progress.gain() or 1.0, progress.best
    shown = titled(name, title)
    ending = verdict(best)
    if ending == SPEED_UNKNOWN:
        return (f"{shown} {'done' if final else 'saved so far'} ({reason}): {SPEED_UNKNOWN} (timed in Triton's "
                f"interpreter), after {plural(progress.experiments, 'experiment')}, in optimized_kernels/{name}.py")
    if ending == WINNER:
        return (f"{shown} {'done' if final else 'saved so far'} ({reason}): {gain:.2f}x over its baseline after "
                f"{plural(progress.experiments, 'experiment')}, in optimized_kernels/{name}.py")
    pytorch_best = sum(row.get("pytorch_best_us") or 0.0 for row in best.bench.timings)
    return (f"{shown} {'done' if final else 'stopped'} ({reason}): no gain alone: its best, "
            f"{best.latency_us or 0:.1f} us, beats PyTorch's best ({pytorch_best:.1f} us) at none of the "
            f"job's shapes ({gain:.2f}x over its baseline, {plural(progress.experiments, 'experiment')}); in "
            f"optimized_kernels/{name}.py for verify to try in the model")


def describe_verdict(number: int, status: str, result: JudgedResult, description: str, progress: JobProgress) -> str:
    """One log line: "exp 7 KEEP PASS 41.3 us (1.21x baseline): BLOCK 64 -> 128", or the failure's message."""
    latency, baseline_us, bench = result.latency_us, progress.baseline.latency_us, result.bench
    timing = (f"{latency:.1f} us ({baseline_us / latency:.2f}x baseline)"
              if bench.passed and latency and baseline_us else "-")
    line = f"exp {number} {status.upper()} {bench.correctness} {timing}: {description}"
    if not bench.passed and bench.message:
        line += f" [{one_line(bench.message, 160)}]"
    return line
