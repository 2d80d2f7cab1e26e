"""Edits an LLM may send instead of a whole kernel.py: a unified diff, or search/replace blocks.

Both apply to a base text (the current kernel.py, or the failed candidate a fix is for) and give the
whole new file, which is what the loop commits and the judge runs. An edit that does not apply raises
EditError saying which hunk or block and why, so the agent can be asked again with the reason.

A diff's hunks are found by their lines, not their numbers (models count lines badly): the old side
(context and removed lines) must occur in the base, and where it occurs more than once the place
nearest the hunk's stated line is taken. A search block must occur exactly once.
"""

from __future__ import annotations

import difflib
import re

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
# A file header, told from a removed "-- x" or added "++ x" line by the path it names.
_FILE_HEADER = re.compile(r"^(?:---|\+\+\+) ((?:[ab]/)?\S*\.py|/dev/null)(?:\s.*)?$")
SEARCH = re.compile(r"^<{5,7} ?SEARCH[ \t]*$")
DIVIDER = re.compile(r"^={5,7}[ \t]*$")
REPLACE = re.compile(r"^>{5,7} ?REPLACE[ \t]*$")
KERNEL_NAMES = {"kernel.py", "/dev/null"}


class EditError(ValueError):
    """An edit that does not apply to its base."""


def unified(before: str, after: str, before_name: str, after_name: str, context: int = 3) -> str:
    """after as a unified diff against before ("" when they are equal)."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        before_name, after_name, n=context)).rstrip("\n")


def apply_diff(base: str, diff: str) -> str:
    """base with a unified diff applied; EditError when a hunk does not match or the diff names another file."""
    lines = base.splitlines()
    hunks = _hunks(diff)
    if not hunks:
        raise EditError("the diff has no @@ hunks")
    offset = 0
    for number, (stated, ops) in enumerate(hunks, start=1):
        old = [text for tag, text in ops if tag != "+"]
        at = _find(lines, old, stated - 1 + offset)
        if at is None:
            first = next((line for line in old if line.strip()), old[0] if old else "")
            raise EditError(f"hunk {number} of the diff does not match the kernel it applies to: its lines "
                            f"(from {first.strip()!r}) are not there, in that order")
        new, position = [], at
        for tag, text in ops:               # context keeps the kernel's own text (it may differ in trailing spaces)
            if tag == " ":
                new.append(lines[position])
            elif tag == "+":
                new.append(text)
            position += tag != "+"
        lines[at:at + len(old)] = new
        offset += len(new) - len(old)
    return "\n".join(lines) + "\n"


def _hunks(diff: str) -> list[tuple[int, list[tuple[str, str]]]]:
    """(stated old start line, its lines as (" " | "-" | "+", text)) per hunk."""
    hunks, current = [], None
    for raw in diff.splitlines():
        header = _FILE_HEADER.match(raw)
        if header:
            name = header.group(1).rsplit("/", 1)[-1]
            if name not in KERNEL_NAMES:
                raise EditError(f"the diff changes {header.group(1)}; only kernel.py may change")
            continue
        hunk = _HUNK.match(raw)
        if hunk:
            current = (int(hunk.group(1)), [])
            hunks.append(current)
            continue
        if current is None or raw.startswith(("diff ", "index ", "\\")):
            continue
        tag, text = (raw[0], raw[1:]) if raw else (" ", "")      # a blank line: context whose space was lost
        if tag not in " -+":
            raise EditError(f"the diff has a line that is not context, '-' or '+' inside a hunk: {raw[:80]!r}")
        current[1].append((tag, text))
    return hunks


def _find(lines: list[str], old: list[str], near: int) -> int | None:
    """Where old occurs in lines (nearest to `near`), exactly, else ignoring trailing spaces; None if nowhere."""
    if not old:
        return min(max(near, 0), len(lines))
    for norm in (lambda s: s, lambda s: s.rstrip()):
        wanted = [norm(line) for line in old]
        places = [i for i in range(len(lines) - len(old) + 1)
                  if norm(lines[i]) == wanted[0] and [norm(x) for x in lines[i:i + len(old)]] == wanted]
        if places:
            return min(places, key=lambda i: abs(i - near))
    return None


def apply_search_replace(base: str, text: str) -> str:
    """base with every SEARCH/REPLACE block of text applied in order; EditError when a search text is not
    there exactly once."""
    blocks = search_blocks(text)
    if not blocks:
        raise EditError("no <<<<<<< SEARCH / ======= / >>>>>>> REPLACE block")
    result = base
    for number, (search, replace) in enumerate(blocks, start=1):
        if not search.strip():
            raise EditError(f"search/replace block {number} has nothing to search for")
        count = result.count(search)
        if count != 1:
            where = "is not in" if count == 0 else f"occurs {count} times in"
            raise EditError(f"search/replace block {number}: its SEARCH text (from {search.strip().splitlines()[0]!r}) "
                            f"{where} the kernel it applies to; copy the lines exactly, with enough of them to "
                            f"be unique")
        result = result.replace(search, replace, 1)
    return result if result.endswith("\n") else result + "\n"


def search_blocks(text: str) -> list[tuple[str, str]]:
    """The (search, replace) pairs of text, each a run of whole lines (ending in a line break when not empty)."""
    blocks, part, search, replace = [], None, [], []
    for line in text.splitlines():
        if SEARCH.match(line):
            part, search, replace = "search", [], []
        elif part == "search" and DIVIDER.match(line):
            part = "replace"
        elif part == "replace" and REPLACE.match(line):
            blocks.append(("".join(f"{x}\n" for x in search), "".join(f"{x}\n" for x in replace)))
            part = None
        elif part == "search":
            search.append(line)
        elif part == "replace":
            replace.append(line)
    if part is not None:
        raise EditError("a search/replace block is not closed by >>>>>>> REPLACE")
    return blocks
