"""What the LLM agent is told about its experiments: bench results, the failed candidate and its error
mapped to its lines, the history with why each was reverted, and a summary of older experiments.

Each history row (policy.history_entry) carries the latency, its ratio to the best at the time, the
keep threshold (the best's latency over 1 + noise: a candidate must be faster than that to be kept),
the reason for a revert and the candidate's hypothesis. Rows older than the window are summarised
one line each, so an idea tried long ago is still seen as tried.
"""

from __future__ import annotations

import re

from autokernel.agents import edits, facts
from autokernel.agents.reply import MAX_FIX_TURNS, fenced
from autokernel.core import hardware, paths
from autokernel.core.contracts import BenchResult
from autokernel.sandbox.redact import scrub

HISTORY_WINDOW = 12                 # experiments shown in full, newest last
MAX_SUMMARY_LINES = 80              # older experiments summarised one line each (the newest of them)
SUMMARY_DESCRIPTION_CHARS = 90
MAX_MESSAGE_CHARS = 3000            # a bench message in the result lines (both ends kept)
MAX_ERROR_CHARS = 12000             # a failed candidate's error, shown whole up to this
ERROR_CONTEXT_LINES = 2
_ERROR_LINE = re.compile(r"kernel\.py(?:\"?, line |:)(\d+)|\(kernel\.py, line (\d+)\)")
_CUDA_LINE = re.compile(r"CUDA_SOURCE(?:\"?, line | line |:)(\d+)")


def describe_result(result: BenchResult | None, gpu: hardware.GPUSpec | None = None) -> str:
    """A bench.py result in a few lines: the failing stage and message, or the speed and the launches."""
    if result is None:
        return "None yet: this is the first experiment on this kernel."
    if not result.passed:
        stage = result.failed_stage or "unknown stage"
        message = shorten(scrub(str(result.message or "(no message)"), paths.ROOT), MAX_MESSAGE_CHARS)
        return f"correctness={result.correctness} at {stage}:\n{message}"
    unit = result.throughput_unit or ""
    lines = [f"correctness=PASS, throughput {number(result.throughput)} {unit}, "
             f"latency {number(result.latency_us)} us, {number(result.pct_peak)}% of peak "
             f"({result.bound or 'unknown'}-bound), speedup {number(result.speedup_vs_pytorch)}x "
             f"vs PyTorch eager, {number(result.speedup_vs_compile)}x vs torch.compile"]
    if result.timing_shapes:
        lines.append(f"timed at {'; '.join(result.timing_shapes)}, dtype {result.dtype}")
    for kernel in result.compiled or []:
        if "num_warps" in kernel or "registers" in kernel:
            lines.append(f"compiled {kernel.get('kernel', '?')}: {number(kernel.get('registers'))} registers per "
                         f"thread, {number(kernel.get('spills'))} spilled, {number(kernel.get('shared_bytes'))} bytes "
                         f"of shared memory, {number(kernel.get('num_warps'))} warps, "
                         f"{number(kernel.get('num_stages'))} stages")
    lines += facts.launch_lines(result.compiled, gpu or hardware.CPU_INTERPRETER)
    if result.launch_floor_us:
        lines.append(f"launch floor: {number(result.launch_floor_us)} us, the GPU time of the smallest launch")
    if result.timings_meaningful is False:
        lines.append("(timed under the CPU interpreter: the numbers say nothing about GPU speed)")
    return "\n".join(lines)


def failure_section(failure: dict, kept_source: str) -> str:
    """The failed candidate as a diff against the kept version, its whole error, and the lines it points at."""
    number_ = failure["experiment"]
    source = failure["source"]
    # The candidate's own words, quoted: the runner took secrets out already; a saved failure from before it did,
    # or from a remote judge's process, is scrubbed here against this process's secrets.
    message = shorten(scrub(str(failure.get("message") or "(no message)"), paths.ROOT), MAX_ERROR_CHARS)
    parts = [f"## The last candidate failed: exp {number_} ({failure.get('description', '')}), "
             f"{failure.get('correctness')} at {failure.get('failed_stage') or 'unknown stage'}"]
    if failure.get("hypothesis"):
        parts.append(f"Its hypothesis: {failure['hypothesis']}")
    parts.append("The judge's whole error:\n" + fenced(message, "text"))
    pointed = error_lines(message, source)
    if pointed:
        parts.append("Where the error points, in the failed candidate:\n" + fenced(pointed, "text"))
    diff = edits.unified(kept_source, source, "a/kernel.py (kept)", f"b/kernel.py (exp {number_})")
    if diff and len(diff) < len(source):
        parts.append("The failed candidate, as a diff against the current kernel.py (the kept version):\n"
                     + fenced(diff, "diff"))
    else:
        parts.append("The failed candidate (a rewrite, shown whole):\n" + fenced(source))
    turn = failure.get("fix_turn", 0)
    if turn < MAX_FIX_TURNS:
        parts.append(f"You may fix it (fix {turn + 1} of {MAX_FIX_TURNS} for this idea): begin your reply with "
                     f"`FIX OF: exp {number_}`; a diff or edits then apply to the failed candidate above. "
                     f"Or drop it and propose another idea.")
    else:
        parts.append(f"This idea has had its {MAX_FIX_TURNS} fixes: drop it and propose another idea.")
    return "\n\n".join(parts)


def error_lines(message: str, source: str) -> str:
    """The source lines an error names (kernel.py line N, or CUDA_SOURCE line N), numbered, with context."""
    lines = source.splitlines()
    wanted = [int(a or b) for a, b in _ERROR_LINE.findall(message)]
    cuda_start = next((i for i, line in enumerate(lines) if re.match(r"\s*CUDA_SOURCE\s*=", line)), None)
    if cuda_start is not None:
        wanted += [cuda_start + 1 + int(n) for n in _CUDA_LINE.findall(message)]
    wanted = sorted({n for n in wanted if 1 <= n <= len(lines)})
    shown, out = set(), []
    for line_number in wanted:
        for n in range(max(1, line_number - ERROR_CONTEXT_LINES), min(len(lines), line_number + ERROR_CONTEXT_LINES) + 1):
            if n in shown:
                continue
            if out and n - 1 not in shown:
                out.append("   ...")
            shown.add(n)
            out.append(f"{'>' if n in wanted else ' '}{n:4d} | {lines[n - 1]}")
    return "\n".join(out)


def history_section(history: list[dict], older: list[dict]) -> str:
    """The recent experiments as a table (newest last), and a one-line summary of each older one."""
    if not history and not older:
        return ""
    shown = history[-HISTORY_WINDOW:]
    parts = []
    summarised = list(older) + history[:-HISTORY_WINDOW] if len(history) > HISTORY_WINDOW else list(older)
    if summarised:
        parts.append(_summary(summarised))
    rows = ["## Recent experiments (oldest first)\n",
            "A candidate is kept when its latency is below the keep threshold: the best's latency over 1 + noise. "
            "ratio = its latency over the best's at the time (below 1 is faster).\n",
            "| exp | status | latency us | ratio | keep below us | why | description | hypothesis |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for entry in shown:
        cells = [entry.get("experiment", "?"), entry.get("status", "?"), number(entry.get("latency_us")),
                 number(entry.get("ratio_to_best")), number(entry.get("threshold_us")),
                 scrub(entry.get("reason") or "", paths.ROOT) or entry.get("correctness") or "",
                 entry.get("description", ""),
                 entry.get("hypothesis") or "-"]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _summary(entries: list[dict]) -> str:
    dropped = len(entries) - MAX_SUMMARY_LINES
    lines = [f"## Earlier experiments ({len(entries)}, summarised: do not try these ideas again)"]
    if dropped > 0:
        kept = [e for e in entries[:dropped] if e.get("status") == "keep"]
        lines.append(f"- {dropped} earlier ones, exp {entries[0].get('experiment')}-{entries[dropped - 1].get('experiment')}"
                     f" ({len(kept)} kept" + (": " + "; ".join(_short(e.get("description", "")) for e in kept)
                                            if kept else "") + ")")
        entries = entries[dropped:]
    for entry in entries:
        why = f", {entry['reason']}" if entry.get("reason") and entry.get("status") != "keep" else ""
        lines.append(f"- exp {entry.get('experiment')} {entry.get('status')}{why}: {_short(entry.get('description', ''))}")
    return "\n".join(lines)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SUMMARY_DESCRIPTION_CHARS else text[:SUMMARY_DESCRIPTION_CHARS - 3] + "..."


def _cell(value) -> str:
    return str(value).replace("|", "/").replace("\n", " ")


def number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def shorten(text: str, limit: int) -> str:
    """Keeps both ends of a long text: a traceback's cause is at its end, a stage's summary at its start."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"
