"""The CRASH message of an exception the kernel file raised: its type and first line, and where in the file.

The worker (autokernel/judge/candidate/worker.py) sends it; the judge makes it one bounded line.
"""

from __future__ import annotations

import traceback
from pathlib import Path


def crash_message(exc: BaseException, kernel_path: Path) -> str:
    """The exception's type and first line, where in the kernel file it was raised, then the rest of its text
    (a Triton compile error's source excerpt, a build log): the judge makes it one bounded line."""
    frames = _kernel_frames(exc, kernel_path.name)
    if frames:
        where = f" (at {kernel_path.name}:{frames[-1].lineno}: {frames[-1].line})"
    elif isinstance(exc, SyntaxError) and exc.lineno and Path(exc.filename or "").name == kernel_path.name:
        where = f" (at {kernel_path.name}:{exc.lineno}: {(exc.text or '').strip()})"
    else:
        where = ""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    rest = " / ".join(lines[1:])
    return f"{type(exc).__name__}: {lines[0] if lines else ''}{where}" + (f" -- {rest}" if rest else "")


def _kernel_frames(exc: BaseException, name: str) -> list:
    """The kernel file's frames of the innermost exception in exc's chain that has any (Triton's interpreter
    raises its own error from the kernel's)."""
    found, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == name]
        found = frames or found
        exc = exc.__cause__ or exc.__context__
    return found
