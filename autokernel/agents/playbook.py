"""The playbook cut to one job: the sections of program.md for its kernel type, backend and shape regime.

program.md is one file for people and for the LLM. A heading may end in a note, invisible when
markdown is rendered, that says which jobs its section is for:

    ## CUDA C++ kernels (BACKEND = "cuda") <!-- for: cuda -->
    ### Softmax <!-- for: type:softmax -->
    ### Latency-bound shapes <!-- for: regime:latency -->

Words name a backend (triton, cuda), `type:<kernel type>` (`type:region` for any of a model's
regions) or `regime:<latency|memory|compute>`, or
`people`: a section for people reading the file (running bench.py by hand), never sent. A
section is for a job when, in each of those three kinds its note names, it names the job's; a
section without a note is for every job, and a `###` section is only shown where its `##` section
is. A job with backend "any" may write either language, so it gets both backends' sections. The
prompt (autokernel/agents/prompt.py) sends the selection as the system message, the notes removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REGIMES = ("latency", "memory", "compute")
BACKENDS = ("triton", "cuda")
PEOPLE_ONLY = "people"
_COMMENT = re.compile(r"^[ \t]*<!--.*?-->[ \t]*\n?", re.DOTALL | re.MULTILINE)   # a note to people, never sent
_HEADING = re.compile(r"^(#{1,3}) (.*?)[ \t]*(?:<!--\s*for:(.*?)-->)?[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


@dataclass
class Section:
    level: int                          # 1, 2 or 3 (#, ##, ###); the text before the first heading is level 0
    title: str
    tags: set[str] = field(default_factory=set)
    lines: list[str] = field(default_factory=list)   # the heading (without its note) and the body


def sections(program: str) -> list[Section]:
    """program.md split at its headings (never inside a fenced block), in order."""
    found = [Section(0, "")]
    fence = None
    for line in program.splitlines():
        opened = _FENCE.match(line)
        if opened and fence is None:
            fence = opened.group(1)
        elif opened and line.strip().startswith(fence):
            fence = None
        heading = _HEADING.match(line) if fence is None else None
        if heading:
            tags = set((heading.group(3) or "").split())
            found.append(Section(len(heading.group(1)), heading.group(2),
                                 tags, [f"{heading.group(1)} {heading.group(2)}"]))
        else:
            found[-1].lines.append(line)
    return found


def is_for(tags: set[str], *, kernel_type: str, backend: str, regime: str | None) -> bool:
    """Whether a section with these tags is for a job of this kernel type, backend and regime."""
    backends = {tag for tag in tags if tag in BACKENDS}
    types = {tag.removeprefix("type:") for tag in tags if tag.startswith("type:")}
    regimes = {tag.removeprefix("regime:") for tag in tags if tag.startswith("regime:")}
    if PEOPLE_ONLY in tags:
        return False
    unknown = tags - {tag for tag in tags if tag in BACKENDS or tag.startswith(("type:", "regime:"))}
    if unknown:
        raise ValueError(f"program.md: unknown section tags {sorted(unknown)}; use {', '.join(BACKENDS)}, "
                         f"type:<kernel type> or regime:<{'|'.join(REGIMES)}>")
    job_backends = set(BACKENDS) if backend == "any" else {backend}
    # `type:region` is for every region of a model (autokernel/kernel_types/regions/: types named region_<digest>).
    family = "region" if kernel_type.startswith("region_") else kernel_type
    return ((not backends or bool(backends & job_backends)) and (not types or kernel_type in types or family in types)
            and (not regimes or regime is None or regime in regimes))


def for_job(program: str, *, kernel_type: str, backend: str, regime: str | None) -> str:
    """The playbook's sections for this job, in program.md's order (regime None: every regime's)."""
    kept, parent_kept = [], True
    for section in sections(program):
        chosen = is_for(section.tags, kernel_type=kernel_type, backend=backend, regime=regime)
        if section.level <= 2:
            parent_kept = chosen
        elif not parent_kept:
            chosen = False
        if chosen:
            kept.append("\n".join(section.lines).strip("\n"))
    text = _COMMENT.sub("", "\n\n".join(part for part in kept if part))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
