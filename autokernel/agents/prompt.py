"""The LLM agents' request for one proposal, built from an AgentContext, in three parts.

  system  the playbook's sections for this job (autokernel/agents/playbook.py): the rules, the
          judge's checks, the reply format, and the advice for its kernel type, backend and regime;
  job     the job's facts: kernel type and reference, the model's shapes and dtype, the GPU and its
          limits, the software, the starter's score; the same on every call of a job;
  turn    what changed: the latest timings, the last result (after a failure, the failed
          candidate as a diff and its whole error, mapped to its lines), what limits the kernel,
          the history, the best versions, the candidates in flight, the current kernel.py.

The first two are the stable prefix: the same text on every call of a job, so a provider's prompt
cache can hold it (Anthropic's cache_control marks it; OpenAI caches a repeated prefix by itself).
Replies are read by autokernel/agents/reply.py.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autokernel.agents import edits, facts, feedback, playbook
from autokernel.agents.reply import MAX_FIX_TURNS, fenced, format_reply
from autokernel.core import hardware
from autokernel.core.contracts import BenchResult
from autokernel.judge import limits
from autokernel.kernel_types import registry

if TYPE_CHECKING:
    from autokernel.agents.base import AgentContext

# What the job's --backend lets the agent write (extract.py picked the starter to match).
BACKEND_LINES = {
    "triton": "Backend: Triton (keep kernel.py a Triton kernel file).",
    "cuda": 'Backend: CUDA C++. kernel.py keeps BACKEND = "cuda": the kernels live in the CUDA_SOURCE string, '
            'compiled by autokernel.judge.cuda_build.load_cuda; the playbook\'s "CUDA C++ kernels" says what the judge '
            "requires.",
    "any": 'Backend: any. Keep Triton, or turn kernel.py into a CUDA C++ kernel file (BACKEND = "cuda", see '
           'the playbook\'s "CUDA C++ kernels") where CUDA C++ can do what Triton cannot.',
}
REGIME_LINES = {
    "latency": "Regime: latency-bound (at its roofline the starter's slowest shape would take less than the launch "
               "floor: one launch's latency decides the time).",
    "memory": "Regime: memory-bound (bytes over bandwidth decide the time).",
    "compute": "Regime: compute-bound (FLOPs over the compute peak decide the time).",
}


@dataclass(frozen=True)
class Messages:
    system: str
    job: str                # the user message's stable first part
    turn: str               # its changing rest

    @property
    def user(self) -> str:
        return f"{self.job}\n\n{self.turn}"


def build_messages(ctx: AgentContext) -> Messages:
    platform = ctx.platform or hardware.platform()
    backend = ctx.job.get("backend", "triton")
    regime = facts.regime({**ctx.job, "kernel_type": ctx.kernel_type}, platform.gpu, ctx.baseline)
    system = playbook.for_job(ctx.program, kernel_type=ctx.kernel_type, backend=backend, regime=regime)
    return Messages(system, _job_section(ctx, platform, regime), build_turn(ctx, platform.gpu))


def _job_section(ctx: AgentContext, platform: hardware.Platform, regime: str) -> str:
    job = ctx.job
    kernel_type = registry.get(ctx.kernel_type)
    shapes = job.get("shapes") or []
    lines = [
        "## The job\n",
        f"Kernel type `{ctx.kernel_type}` (job rank {job.get('rank', '?')}): {kernel_type.description}.",
        f"Model: {job.get('model', 'unknown')}, dtype {job.get('dtype') or 'unknown'}.",
        *facts.platform_lines(platform),
        BACKEND_LINES[job.get("backend", "triton")],
        REGIME_LINES[regime],
        "kernel_fn must compute exactly what this PyTorch reference computes (reference.py):",
        _reference_text(kernel_type),
        *_region_lines(kernel_type, job),
        "Shapes the model calls it with (most time first): "
        + ("; ".join(registry.format_shape(shape) for shape in shapes) or "unknown") + ".",
        "The goal is the model's own shapes: beat the faster of PyTorch eager and torch.compile at them, in GPU "
        "time (the judge's events around one call, L2 flushed; the host's launch time is not in it), not only "
        "the starting version.",
    ]
    if ctx.baseline is not None:
        lines.append("The starter kernel scored: " + feedback.describe_result(ctx.baseline, platform.gpu))
    return "\n".join(lines)


def build_turn(ctx: AgentContext, gpu: hardware.GPUSpec) -> str:
    sections = [
        _shape_table(ctx.job.get("shapes") or [], _latest_timings(ctx)),
        "## Last experiment\n\n" + feedback.describe_result(ctx.last_result, gpu),
        feedback.failure_section(ctx.failure, ctx.kernel_source) if ctx.failure else "",
        _limits_section(ctx),
        feedback.history_section(ctx.history, ctx.older or []),
        _best_versions_section(ctx, gpu),
        _in_flight_section(ctx.in_flight),
        "## Current kernel.py (the last kept version)\n\n" + fenced(ctx.kernel_source),
        _your_turn(ctx),
    ]
    return "\n\n".join(section for section in sections if section)


# ---------------------------------------------------------------- regions (issue 25): kept apart from the rest
def _reference_text(kernel_type) -> str:
    """The reference as the LLM reads it: its source, or, for a region of the model (autokernel/kernel_types/regions/),
    the model's PyTorch source lines it covers and the ATen ops the judge runs as its reference (KernelType.source)."""
    return fenced(kernel_type.source if kernel_type.source is not None else inspect.getsource(kernel_type.reference))


def _region_lines(kernel_type, job: dict) -> list[str]:
    """What a region's job adds: where its starter came from, its share of the profile, and what may move."""
    if not kernel_type.name.startswith("region_"):
        return []
    return [f"This region is {job.get('share', 0.0):.1%} of the model's profiled time (made 2x faster: "
            f"{job.get('amdahl_2x', 1.0):.3f}x end to end). kernel.py started as the Triton code torch.compile's "
            "Inductor generated for it, so it begins at torch.compile's speed: fuse further (one kernel where Inductor "
            "launched two, an epilogue into a GEMM), change the tiling, or rewrite it. It is judged, and routed, at "
            "exactly the shapes, strides and dtype above."]


def _latest_pass(ctx: AgentContext) -> BenchResult | None:
    """The last passing result with timings (the best kept one when the last failed)."""
    for result in [ctx.last_result, *(result for _, result in ctx.best_versions), ctx.baseline]:
        if result is not None and result.passed and result.timings:
            return result
    return None


def _latest_timings(ctx: AgentContext) -> list[dict]:
    latest = _latest_pass(ctx)
    return latest.timings if latest else []


def _limits_section(ctx: AgentContext) -> str:
    """What limits the kernel, from the judge's summary of the latest passing result (bench.py's `limits`)."""
    latest = _latest_pass(ctx)
    lines = limits.describe(latest.limits) if latest else []
    if not lines:
        return ""
    which = "the last experiment" if latest is ctx.last_result else "the latest passing version"
    return f"## What limits the kernel ({which})\n\n" + "\n".join(lines)


def _shape_table(shapes: list[dict], timings: list[dict]) -> str:
    """The model's shapes, with our time and PyTorch's at each where the judge has measured them."""
    by_shape = {row.get("shape"): row for row in timings}
    rows = ["## Latest measured times per call (GPU time)\n",
            "| shape | ours us | PyTorch eager us | torch.compile us | speedup vs PyTorch's best |",
            "| --- | --- | --- | --- | --- |"]
    for shape in shapes or [{}]:
        text = registry.format_shape(shape) if shape else "unknown"
        row = by_shape.get(text, {})
        ours, eager, compiled = row.get("latency_us"), row.get("pytorch_latency_us"), row.get("compile_latency_us")
        best = min((t for t in (eager, compiled) if t), default=None)
        rows.append(f"| {text} | {feedback.number(ours)} | {feedback.number(eager)} | {feedback.number(compiled)} | "
                    f"{feedback.number(best / ours) + 'x' if best and ours else '-'} |")
    return "\n".join(rows)


def _best_versions_section(ctx: AgentContext, gpu: hardware.GPUSpec) -> str:
    """The best kept versions: the current one named, the others as diffs against it (or whole, if shorter)."""
    if not ctx.best_versions:
        return ""
    parts = ["## Best versions so far (best first)"]
    for place, (source, result) in enumerate(ctx.best_versions, start=1):
        parts.append(f"### Best #{place}: {feedback.describe_result(result, gpu)}")
        if source == ctx.kernel_source:
            parts.append("(This is the current kernel.py below.)")
            continue
        diff = edits.unified(ctx.kernel_source, source, "a/kernel.py (current)", f"b/kernel.py (best #{place})")
        parts.append(f"As a diff against the current kernel.py:\n{fenced(diff, 'diff')}"
                     if diff and len(diff) < len(source) else fenced(source))
    return "\n\n".join(parts)


def _in_flight_section(in_flight: list[str] | None) -> str:
    """With several GPUs: the candidates other GPUs are judging now, so this one tries another direction."""
    if not in_flight:
        return ""
    listed = "\n".join(f"- {feedback.shorten(description, 200)}" for description in in_flight)
    return ("## Being judged right now on other GPUs\n\nThese candidates, proposed from this same kernel.py, are "
            "being judged now; their results are not known yet. Propose a different idea, not one of these:\n"
            + listed)


def _your_turn(ctx: AgentContext) -> str:
    several = (f" You may give up to {ctx.max_candidates} candidates from different directions (each with its own "
               f"HYPOTHESIS, DESCRIPTION and code): with {ctx.max_candidates} GPUs they are judged side by side."
               if ctx.max_candidates > 1 else " Give ONE candidate.")
    fix = (f" Or fix the failed candidate: begin with `FIX OF: exp {ctx.failure['experiment']}`."
           if ctx.failure and ctx.failure.get("fix_turn", 0) < MAX_FIX_TURNS else "")
    return ("## Your turn\n\nThink about what limits the current kernel, then reply in the playbook's format:"
            + several + fix + " The format:\n\n"
            + format_reply("<one line: what changed and why it should be faster>", "<the new kernel.py>",
                           hypothesis="<2-3 lines: what limits it now, and why this change should help>"))
