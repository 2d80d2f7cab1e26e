"""Reading an LLM's reply: its candidates, each a hypothesis, a description and a whole new kernel.py.

The format (program.md, "Your reply"): `HYPOTHESIS:` (2-3 lines), `DESCRIPTION:` (one line), then the
kernel as a whole file in a ```python block, a unified diff in a ```diff block, or search/replace
edits; `FIX OF: exp N` first makes it a fix of the failed candidate N, whose text the diff or edits
then apply to. A reply may hold several candidates, each with its own keys and code.

Code blocks are read line by line, not by a pattern over the whole text: a block opens with ``` or ~~~
(and an info string: python, diff, text...) and closes with a bare fence of the same character, at
least as long and no more indented; inside Python, a fence line within a triple-quoted string (a
docstring that shows a fenced example) does not close the block. Whether the code is right is the
judge's call; a reply this module cannot read raises ReplyError, which the agent sends back to the
model once (autokernel/agents/base.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autokernel.agents import edits
from autokernel.core.live import printable_line

MAX_DESCRIPTION_CHARS = 200
MAX_HYPOTHESIS_CHARS = 400
MAX_FIX_TURNS = 2                   # fixes of one idea, each an experiment of its own
_OPEN = re.compile(r"^([ \t]{0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")
_KEY = re.compile(r"^[ \t>#*_`-]*(description|hypothesis|fix of)[*_`]*[ \t]*:[*_`]*(.*)$", re.IGNORECASE)
_PYTHON_INFO = {"", "python", "python3", "py"}
_DIFF_INFO = {"diff", "patch", "udiff"}


class ReplyError(ValueError):
    """A reply with no candidate that can be read, and why."""


@dataclass
class Candidate:
    description: str
    source: str                         # the whole new kernel.py
    hypothesis: str = ""
    fix_of: int | None = None           # the failed experiment this fixes
    form: str = "file"                  # how it came: "file", "diff" or "edits"


@dataclass
class _Block:
    info: str
    body: str


@dataclass
class _Draft:
    keys: dict[str, str] = field(default_factory=dict)
    payload: tuple[str, str] | None = None          # (form, text): file, diff or edits
    snippets: list[str] = field(default_factory=list)


def format_reply(description: str, kernel_source: str, hypothesis: str = "", fix_of: int | None = None) -> str:
    """A reply in the format `parse` reads."""
    lines = [f"FIX OF: exp {fix_of}"] if fix_of is not None else []
    lines += [f"HYPOTHESIS: {hypothesis}"] if hypothesis else []
    return "\n".join(lines + [f"DESCRIPTION: {description}", "", fenced(kernel_source)]) + "\n"


def fenced(text: str, info: str = "python") -> str:
    """text in a fenced block, with a longer fence where a line of it is a fence itself."""
    fence = "````" if "\n```" in "\n" + text else "```"
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def parse(text: str, *, current: str, failure: dict | None = None, truncated: bool = False,
          limit: int = 1) -> tuple[list[Candidate], list[str]]:
    """The reply's candidates (at most `limit`), each a whole kernel.py, and notes on what was left out.

    current: the kernel.py a diff or edits apply to; failure: the failed candidate a `FIX OF` may name
    ({"experiment", "source", "fix_turn"}); truncated: the API stopped the reply at its token limit
    (it only sharpens a message). ReplyError when no candidate can be read."""
    segments, unclosed = _segments(text)
    if unclosed:
        cause = "the reply hit the token limit" if truncated else "the reply ended"
        raise ReplyError(f"{cause} inside a code block: the kernel is incomplete")
    drafts = _drafts(segments)
    with_payload = [draft for draft in drafts if draft.payload or draft.snippets]
    if not with_payload:
        cut = " (the reply hit the token limit)" if truncated else ""
        raise ReplyError(f"no ```python code block with the new kernel.py (nor a ```diff block or search/replace "
                         f"edits) in the reply{cut}")
    notes = []
    if len(with_payload) > limit:
        taken = "the first is" if limit == 1 else f"the first {limit} are"
        notes.append(f"the reply held {len(with_payload)} candidates; only {taken} taken")
    candidates, errors = [], []
    for number, draft in enumerate(with_payload[:limit], start=1):
        try:
            candidates.append(_candidate(draft, number, len(with_payload), current, failure, with_payload[:number - 1]))
        except ReplyError as err:       # one unreadable candidate of several: the others still go
            errors.append(err)
    if not candidates:
        raise errors[0]
    notes += [f"left out: {err}" for err in errors]
    return candidates, notes


def _segments(text: str) -> tuple[list[str | _Block], bool]:
    """The reply as prose lines and code blocks, in order; and whether it ended inside a block."""
    out: list[str | _Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _OPEN.match(line)
        if edits.SEARCH.match(line.strip()):                 # search/replace edits outside a fence
            end = next((j for j in range(i, len(lines)) if edits.REPLACE.match(lines[j].strip())), None)
            if end is None:
                return out, True
            out.append(_Block("edits", "\n".join(lines[i:end + 1])))
            i = end + 1
            continue
        if not opened:
            out.append(line)
            i += 1
            continue
        indent, fence, info = opened.group(1), opened.group(2), opened.group(3).lower()
        end = _closing(lines, i + 1, indent, fence, python=info in _PYTHON_INFO)
        if end is None:
            return out, True
        out.append(_Block(info, "\n".join(lines[i + 1:end])))
        i = end + 1
    return out, False


def _closing(lines: list[str], start: int, indent: str, fence: str, *, python: bool) -> int | None:
    """The index of the line closing a block opened by `fence` at `indent`, or None. In Python, a fence
    inside a triple-quoted string is text; if no other fence closes the block, the first such one does."""
    strings, skipped = _TripleQuotes(), None
    closing = re.compile(rf"^([ \t]*){re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
    for j in range(start, len(lines)):
        match = closing.match(lines[j])
        if match and len(match.group(1).expandtabs()) <= len(indent.expandtabs()):
            if not (python and strings.inside):
                return j
            skipped = j if skipped is None else skipped
        if python:
            strings.feed(lines[j])
    return skipped


class _TripleQuotes:
    """Follows Python source line by line: whether a triple-quoted string is open at the end of what was fed."""

    def __init__(self):
        self.open: str | None = None

    @property
    def inside(self) -> bool:
        return self.open is not None

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if self.open:
                if c == "\\":
                    i += 2
                elif line.startswith(self.open, i):
                    self.open, i = None, i + 3
                else:
                    i += 1
            elif c == "#":
                return
            elif c in "\"'":
                if line.startswith(c * 3, i):
                    self.open, i = c * 3, i + 3
                    continue
                i += 1
                while i < n and line[i] != c:          # a one-line string: skip to its closing quote
                    i += 2 if line[i] == "\\" else 1
                i += 1
            else:
                i += 1


def _drafts(segments: list[str | _Block]) -> list[_Draft]:
    """Group prose keys and code blocks into candidates: a key the current one already has, or a second
    kernel (file, diff or edits) after it has one, starts the next."""
    drafts = [_Draft()]
    hypothesis_open = False
    for segment in segments:
        current = drafts[-1]
        if isinstance(segment, _Block):
            hypothesis_open = False
            form = _form(segment)
            if form == "snippet":
                current.snippets.append(segment.body)
                continue
            if current.payload is not None:
                drafts.append(current := _Draft())
            current.payload = (form, segment.body)
            continue
        key = _KEY.match(segment)
        if key:
            name, value = key.group(1).lower(), key.group(2).strip(" \t*_`")
            if name in current.keys or (current.payload is not None and "description" in current.keys):
                drafts.append(current := _Draft())
            current.keys[name] = value
            hypothesis_open = name == "hypothesis"
        elif hypothesis_open and segment.strip():
            current.keys["hypothesis"] += " " + segment.strip()
        else:
            hypothesis_open = False
    return drafts


def _form(block: _Block) -> str:
    body = block.body
    if block.info in _DIFF_INFO or body.lstrip().startswith(("--- ", "diff --git", "@@ ")):
        return "diff"
    if any(edits.SEARCH.match(line.strip()) for line in body.splitlines()):
        return "edits"
    if block.info in _PYTHON_INFO and "KERNEL_TYPE" in body and re.search(r"^def kernel_fn\(", body, re.MULTILINE):
        return "file"
    return "snippet"


def _candidate(draft: _Draft, number: int, count: int, current: str, failure: dict | None,
               previous: list[_Draft]) -> Candidate:
    which = f"candidate {number} of {count}: " if count > 1 else ""
    description = " ".join(draft.keys.get("description", "").split())
    if not description and previous and previous[-1].keys.get("description"):
        description = f"{' '.join(previous[-1].keys['description'].split())} (variant {number})"
    if not description:
        raise ReplyError(f"{which}no `DESCRIPTION: <one line>` line (or an empty one) in the reply")
    fix_of, base = _fix_base(draft.keys.get("fix of"), current, failure, which)
    form, text = draft.payload or ("file", max(draft.snippets, key=len))
    try:
        if form == "diff":
            source = edits.apply_diff(base, text)
        elif form == "edits":
            source = edits.apply_search_replace(base, text)
        else:
            source = text if text.endswith("\n") else text + "\n"
    except edits.EditError as err:
        target = f"the failed candidate exp {fix_of}" if fix_of is not None else "the current kernel.py"
        raise ReplyError(f"{which}{err} (it was applied to {target})") from None
    if not source.strip():
        raise ReplyError(f"{which}the ```python code block is empty")
    try:
        source.encode()
    except UnicodeEncodeError:      # a lone surrogate (JSON's \ud800): kernel.py could not be written
        raise ReplyError(f"{which}the kernel holds a character that is not UTF-8 (a lone surrogate)") from None
    hypothesis = printable_line(draft.keys.get("hypothesis", ""))[:MAX_HYPOTHESIS_CHARS]
    return Candidate(printable_line(description)[:MAX_DESCRIPTION_CHARS], source, hypothesis, fix_of, form)


def _fix_base(value: str | None, current: str, failure: dict | None, which: str) -> tuple[int | None, str]:
    """(the experiment a FIX OF names, the text its diff or edits apply to); (None, current) for a new idea."""
    if value is None:
        return None, current
    named = re.search(r"\d+", value)
    if named is None:
        raise ReplyError(f"{which}`FIX OF:` must name the failed experiment, as `FIX OF: exp 7`")
    number = int(named.group())
    if failure is None or failure.get("experiment") != number:
        shown = f"exp {failure['experiment']}" if failure else "none"
        raise ReplyError(f"{which}FIX OF names exp {number}, but the failed candidate that may be fixed is {shown}")
    if failure.get("fix_turn", 0) >= MAX_FIX_TURNS:
        raise ReplyError(f"{which}exp {number}'s idea has had its {MAX_FIX_TURNS} fixes; drop it and propose a new idea")
    return number, failure["source"]
