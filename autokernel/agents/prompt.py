"""Builds the LLM agents' prompt from an AgentContext and parses their reply into a description and a kernel.

The reply format is strict: a line `DESCRIPTION: <one line>` and the complete new kernel.py in one
```python fenced block. Parsing tolerates prose around them, but a reply without a description or
without a closed code block is rejected (ValueError); whether the code is right is the judge's call.
"""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING

from autokernel import hardware, limits, registry
from autokernel.contracts import PASS

if TYPE_CHECKING:
    from autokernel.agents.base import AgentContext

MAX_DESCRIPTION_CHARS = 200
MAX_MESSAGE_CHARS = 3000
MAX_HISTORY_ROWS = 20
HISTORY_MESSAGE_CHARS = 120

SYSTEM_INTRO = (
    "You are the optimizing agent of AutoKernel's overnight keep-or-revert loop. Each turn you "
    "propose one complete new kernel.py; the fixed judge bench.py checks it and times it, and the loop "
    "keeps it only if it is correct and faster. Follow the playbook below.\n\n"
)

_FENCE_OPEN = r"^[ \t]*```[ \t]*(?:python3?|py)?[ \t]*$"
_CODE_BLOCK = re.compile(_FENCE_OPEN + r"\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL | re.IGNORECASE)
_UNCLOSED_BLOCK = re.compile(_FENCE_OPEN, re.MULTILINE | re.IGNORECASE)
_DESCRIPTION = re.compile(r"^[ \t>#*_`]*description[*_`]*[ \t]*:(.*)$", re.MULTILINE | re.IGNORECASE)


def build_messages(ctx: AgentContext) -> tuple[str, str]:
    """The (system, user) messages for one proposal."""
    return SYSTEM_INTRO + ctx.program, build_user_message(ctx)


def build_user_message(ctx: AgentContext) -> str:
    sections = [
        _job_section(ctx),
        "## Last experiment\n\n" + describe_result(ctx.last_result),
        _limits_section(ctx),
        _history_section(ctx.history),
        _best_versions_section(ctx),
        _in_flight_section(ctx.in_flight),
        "## Current kernel.py (the last kept version)\n\n" + _fenced(ctx.kernel_source),
        _reply_instructions(),
    ]
    return "\n\n".join(section for section in sections if section)


def _in_flight_section(in_flight: list[str] | None) -> str:
    """With several GPUs: the candidates other GPUs are judging now, so this one tries another direction."""
    if not in_flight:
        return ""
    listed = "\n".join(f"- {_shorten(description, 200)}" for description in in_flight)
    return ("## Being judged right now on other GPUs\n\nThese candidates, proposed from this same kernel.py, are "
            "being judged now; their results are not known yet. Propose a different idea, not one of these:\n"
            + listed)


def describe_result(result: dict | None) -> str:
    """A bench.py result in a few lines: the failing stage and message, or the speed."""
    if result is None:
        return "None yet: this is the first experiment on this kernel."
    correctness = result.get("correctness", "?")
    if correctness != PASS:
        stage = result.get("failed_stage") or "unknown stage"
        message = _shorten(str(result.get("message") or "(no message)"), MAX_MESSAGE_CHARS)
        return f"correctness={correctness} at {stage}:\n{message}"
    unit = result.get("throughput_unit") or ""
    lines = [f"correctness=PASS, throughput {_number(result.get('throughput'))} {unit}, "
             f"latency {_number(result.get('latency_us'))} us, {_number(result.get('pct_peak'))}% of peak "
             f"({result.get('bound') or 'unknown'}-bound), speedup {_number(result.get('speedup_vs_pytorch'))}x "
             f"vs PyTorch eager, {_number(result.get('speedup_vs_compile'))}x vs torch.compile"]
    if result.get("timing_shapes"):
        lines.append(f"timed at {'; '.join(result['timing_shapes'])}, dtype {result.get('dtype', '?')}")
    for kernel in result.get("compiled") or []:
        lines.append(f"compiled {kernel.get('kernel', '?')}: {_number(kernel.get('registers'))} registers per thread, "
                     f"{_number(kernel.get('spills'))} spilled, {_number(kernel.get('shared_bytes'))} bytes of shared "
                     f"memory, {_number(kernel.get('num_warps'))} warps, {_number(kernel.get('num_stages'))} stages")
    if result.get("timings_meaningful") is False:
        lines.append("(timed under the CPU interpreter: the numbers say nothing about GPU speed)")
    return "\n".join(lines)


def format_reply(description: str, kernel_source: str) -> str:
    """A reply in the format parse_reply accepts."""
    return f"DESCRIPTION: {description}\n\n{_fenced(kernel_source)}\n"


def parse_reply(text: str, *, truncated: bool = False) -> tuple[str, str]:
    """(description, kernel source) from a reply; ValueError saying what is missing.

    `truncated` is whether the API stopped the reply at its token limit; it only sharpens the message.
    """
    blocks = list(_CODE_BLOCK.finditer(text))
    tail = text[blocks[-1].end():] if blocks else text
    if _UNCLOSED_BLOCK.search(tail):
        cause = "the reply hit the token limit" if truncated else "the reply ended"
        raise ValueError(f"{cause} inside a code block: the kernel is incomplete")
    if not blocks:
        cut = " (the reply hit the token limit)" if truncated else ""
        raise ValueError(f"no ```python code block with the new kernel.py in the reply{cut}")
    # Models sometimes quote a snippet before the full file: the longest block is the kernel.
    source = max((block.group(1) for block in blocks), key=len)
    if not source.strip():
        raise ValueError("the ```python code block is empty")
    match = _DESCRIPTION.search(_CODE_BLOCK.sub("", text))
    description = " ".join(match.group(1).strip(" \t*_`").split()) if match else ""
    if not description:
        raise ValueError("no `DESCRIPTION: <one line>` line (or an empty one) in the reply")
    return description[:MAX_DESCRIPTION_CHARS], source


# What the job's --backend lets the agent write (extract.py picked the starter to match).
BACKEND_LINES = {
    "triton": "Backend: Triton (keep kernel.py a Triton kernel file).",
    "cuda": 'Backend: CUDA C++. kernel.py keeps BACKEND = "cuda": the kernels live in the CUDA_SOURCE string, '
            'compiled by autokernel.cuda_build.load_cuda; program.md\'s "CUDA C++ kernels" says what the judge '
            "requires.",
    "any": 'Backend: any. Keep Triton, or turn kernel.py into a CUDA C++ kernel file (BACKEND = "cuda", see '
           'program.md\'s "CUDA C++ kernels") where CUDA C++ can do what Triton cannot.',
}


def _job_section(ctx: AgentContext) -> str:
    job = ctx.job
    kernel_type = registry.get(ctx.kernel_type)
    shapes = job.get("shapes") or []
    lines = [
        "## The job\n",
        f"Kernel type `{ctx.kernel_type}` (job rank {job.get('rank', '?')}): {kernel_type.description}.",
        f"Model: {job.get('model', 'unknown')}, dtype {job.get('dtype') or 'unknown'}.",
        _gpu_line(hardware.detect()),
        BACKEND_LINES[job.get("backend", "triton")],
        "kernel_fn must compute exactly what this PyTorch reference computes (reference.py):",
        _reference_text(kernel_type),
        *_region_lines(kernel_type, job),
        _shape_table(shapes, _latest_timings(ctx)),
        "The goal is the model's own shapes above: beat the faster of PyTorch eager and torch.compile at "
        "them (a whole call, launch overhead included), not only the starting version.",
    ]
    if job.get("baseline") is not None:
        lines.append("The starter kernel scored: " + describe_result(job["baseline"]))
    return "\n".join(lines)


# ---------------------------------------------------------------- regions (issue 25): kept apart from the rest
def _reference_text(kernel_type) -> str:
    """The reference as the LLM reads it: its source, or, for a region of the model (autokernel/regions/), the model's
    PyTorch source lines it covers and the ATen ops the judge runs as its reference (KernelType.source)."""
    return _fenced(kernel_type.source if kernel_type.source is not None else inspect.getsource(kernel_type.reference))


def _region_lines(kernel_type, job: dict) -> list[str]:
    """What a region's job adds: where its starter came from, its share of the profile, and what may move."""
    if not kernel_type.name.startswith("region_"):
        return []
    return [f"This region is {job.get('share', 0.0):.1%} of the model's profiled time (made 2x faster: "
            f"{job.get('amdahl_2x', 1.0):.3f}x end to end). kernel.py started as the Triton code torch.compile's "
            "Inductor generated for it, so it begins at torch.compile's speed: fuse further (one kernel where Inductor "
            "launched two, an epilogue into a GEMM), change the tiling, or rewrite it. It is judged, and routed, at "
            "exactly the shapes, strides and dtype above."]


def _gpu_line(gpu: hardware.GPUSpec) -> str:
    """The GPU and the peaks the kernel is measured against (the roofline's two ceilings)."""
    if gpu.mem_bandwidth_gbs is None:
        return f"GPU: none ({gpu.name}): kernels run in Triton's CPU interpreter, timings mean nothing."
    peaks = ", ".join(f"{name} {value:g} TFLOP/s" for name, value in (
        ("fp16", gpu.fp16_tflops), ("bf16", gpu.bf16_tflops), ("fp32", gpu.fp32_tflops)) if value)
    estimated = " (estimated)" if gpu.estimated else ""
    return f"GPU: {gpu.name}; peaks{estimated}: {peaks}, memory {gpu.mem_bandwidth_gbs:g} GB/s."


def _latest_pass(ctx: AgentContext) -> dict | None:
    """The last passing result with timings (the best kept one when the last failed)."""
    for result in [ctx.last_result, *(result for _, result in ctx.best_versions), ctx.job.get("baseline")]:
        if result and result.get("correctness") == PASS and result.get("timings"):
            return result
    return None


def _latest_timings(ctx: AgentContext) -> list[dict]:
    """The per-shape timings of the latest passing result."""
    latest = _latest_pass(ctx)
    return latest["timings"] if latest else []


def _limits_section(ctx: AgentContext) -> str:
    """What limits the kernel, from the judge's summary of the latest passing result (bench.py's `limits`)."""
    latest = _latest_pass(ctx)
    lines = limits.describe(latest.get("limits")) if latest else []
    if not lines:
        return ""
    which = "the last experiment" if latest is ctx.last_result else "the latest passing version"
    return f"## What limits the kernel ({which})\n\n" + "\n".join(lines)


def _shape_table(shapes: list[dict], timings: list[dict]) -> str:
    """The model's shapes, with our time and PyTorch's at each where the judge has measured them."""
    by_shape = {row.get("shape"): row for row in timings}
    rows = ["Shapes the model calls it with (most time first), and the latest measured times per call:\n",
            "| shape | ours us | PyTorch eager us | torch.compile us | speedup vs PyTorch's best |",
            "| --- | --- | --- | --- | --- |"]
    for shape in shapes or [{}]:
        text = registry.format_shape(shape) if shape else "unknown"
        row = by_shape.get(text, {})
        ours, eager, compiled = row.get("latency_us"), row.get("pytorch_latency_us"), row.get("compile_latency_us")
        best = min((t for t in (eager, compiled) if t), default=None)
        rows.append(f"| {text} | {_number(ours)} | {_number(eager)} | {_number(compiled)} | "
                    f"{_number(best / ours) + 'x' if best and ours else '-'} |")
    return "\n".join(rows)


def _history_section(history: list[dict]) -> str:
    if not history:
        return ""
    rows = ["## Recent experiments (oldest first)\n",
            "| exp | status | correctness | throughput | speedup | description | message |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for entry in history[-MAX_HISTORY_ROWS:]:
        cells = [entry.get("experiment", "?"), entry.get("status", "?"), entry.get("correctness", "?"),
                 _number(entry.get("throughput")), _number(entry.get("speedup_vs_pytorch")),
                 entry.get("description", ""), _shorten(str(entry.get("message") or ""), HISTORY_MESSAGE_CHARS)]
        rows.append("| " + " | ".join(str(cell).replace("|", "/").replace("\n", " ") for cell in cells) + " |")
    return "\n".join(rows)


def _best_versions_section(ctx: AgentContext) -> str:
    if not ctx.best_versions:
        return ""
    parts = ["## Best versions so far (best first)"]
    for place, (source, result) in enumerate(ctx.best_versions, start=1):
        parts.append(f"### Best #{place}: {describe_result(result)}")
        parts.append("(This is the current kernel.py below.)" if source == ctx.kernel_source else _fenced(source))
    return "\n\n".join(parts)


def _reply_instructions() -> str:
    return ("## Your reply\n\n"
            "Think about what limits the current kernel, pick ONE idea, and reply with a line starting "
            "`DESCRIPTION:` that says in one line what you changed, then the complete new kernel.py in one "
            "```python fenced block (the whole file, not a diff). Anything else in the reply is ignored. "
            "The format:\n\n" + format_reply("<one line: what changed and why it should be faster>",
                                              "<the complete new kernel.py>"))


def _fenced(source: str) -> str:
    return "```python\n" + source.rstrip("\n") + "\n```"


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _shorten(text: str, limit: int) -> str:
    """Keeps both ends of a long text: a traceback's cause is at its end, a stage's summary at its start."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"
