"""The loop's rules: when a candidate is kept, how noisy the timings are, and when a kernel is done.

The noise rule: the two baseline runs give latencies a and b; noise = |a - b| / min(a, b), never
below the noise floor. A candidate is kept when best_latency / candidate_latency > 1 + noise, so a
change that timing jitter alone could explain is not kept. A kernel is done after that many reverts
in a row, after its time on it, at the target speedup over its baseline, or at the target fraction
of the hardware peak (the run's budget and cost cap are checked by the loop itself).
"""

from __future__ import annotations

from autokernel.live import format_duration
from autokernel.run_state import JobProgress, RunSettings

DESCRIPTION_CHARS = 200


def is_improvement(result: dict, best: dict, noise: float) -> bool:
    """The keep rule: a PASS whose latency beats the best by more than the noise."""
    latency, best_latency = result.get("latency_us"), best.get("latency_us")
    if result.get("correctness") != "PASS" or not latency or not best_latency:
        return False
    return best_latency / latency > 1 + noise


def measured_noise(first: dict, second: dict, floor: float) -> float:
    a, b = first.get("latency_us"), second.get("latency_us")
    if not a or not b:
        return floor
    return max(floor, abs(a - b) / min(a, b))


def job_name(job: dict) -> str:
    return f"{job['rank']}_{job['kernel_type']}"


def one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    return " ".join(str(text).split())[:limit] or "(no description)"


def job_stop_reason(progress: JobProgress, settings: RunSettings) -> str | None:
    """Why the current kernel is done, or None to go on."""
    if progress.consecutive_reverts >= settings.max_consecutive_reverts:
        return f"{progress.consecutive_reverts} reverts in a row"
    if progress.elapsed_s >= settings.kernel_time_s:
        return f"{format_duration(progress.elapsed_s)} spent on this kernel"
    gain = progress.gain()
    if gain is not None and gain >= settings.target_speedup:
        return f"{gain:.2f}x over its baseline"
    pct_peak = progress.best.get("pct_peak")
    if pct_peak is not None and pct_peak >= settings.peak_fraction_target * 100:
        return f"{pct_peak:.0f}% of the hardware peak"
    return None


def outcome(progress: JobProgress, reason: str, *, source_commit: str, tag: str) -> dict:
    """A kernel's result, as its optimized_kernels/manifest.json entry records it (beside plugin's fields)."""
    return {"baseline_latency_us": progress.baseline.get("latency_us"),
            "best_latency_us": progress.best.get("latency_us"),
            "speedup_over_baseline": round(progress.gain() or 1.0, 4),
            "baseline_speedup_vs_pytorch": progress.baseline.get("speedup_vs_pytorch"),
            "best_speedup_vs_pytorch": progress.best.get("speedup_vs_pytorch"),
            "timings_meaningful": progress.best.get("timings_meaningful"),
            "experiments": progress.experiments, "stopped_because": reason,
            "source_commit": source_commit, "tag": tag}


def describe_verdict(number: int, status: str, result: dict, description: str, progress: JobProgress) -> str:
    """One log line: "exp 7 KEEP PASS 41.3 us (1.21x baseline): BLOCK 64 -> 128", or the failure's message."""
    latency = result.get("latency_us")
    passed = result.get("correctness") == "PASS"
    timing = (f"{latency:.1f} us ({progress.baseline['latency_us'] / latency:.2f}x baseline)"
              if passed and latency and progress.baseline.get("latency_us") else "-")
    line = f"exp {number} {status.upper()} {result.get('correctness')} {timing}: {description}"
    if not passed and result.get("message"):
        line += f" [{one_line(result['message'], 160)}]"
    return line
