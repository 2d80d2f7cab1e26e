"""verify's sandboxed child's output in two: its own lines for the user's terminal, torch's for the workspace's log.

The child (verify.py --sandboxed-fd) prints its progress, report and errors through `OwnLines`, which marks each of
its lines; torch, Inductor and Triton write unmarked lines to the same pipes (warnings, autotuning tables, the
tracebacks of configs that failed to compile). The parent (isolated.verify_in_sandbox) shows the marked lines, the
report on stdout and the errors on stderr, and appends every other line to workspace/torch.log (`Split`), so the
terminal holds verify's own words. A crash's reason is still the child's last stderr lines (isolated._tail).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, TextIO

from autokernel.core.live import LazyLog

# ASCII's record and unit separators: no line of verify's own, or of torch's, starts with either.
OWN, OWN_ERROR = "\x1e", "\x1f"


class OwnLines(io.TextIOBase):
    """A text stream that marks each line written to it as the child's own (`mark`: OWN, or OWN_ERROR)."""

    def __init__(self, stream: TextIO, mark: str = OWN):
        self.stream, self.mark, self._line_start = stream, mark, True

    def write(self, text: str) -> int:
        # Lines end at "\n" alone, as the parent reads them (str.splitlines would also split at the marks).
        parts = text.split("\n")
        out = []
        for index, piece in enumerate(parts):
            ends = index < len(parts) - 1           # a "\n" follows this piece
            if self._line_start and (piece or ends):
                out.append(self.mark)
                self._line_start = False
            out.append(piece)
            if ends:
                out.append("\n")
                self._line_start = True
        self.stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:          # a pipe to the parent; the parent passes the terminal's width (COLUMNS)
        return False


class Split:
    """The parent's side, each line of the child's output: its own shown (`show`, `show_error`), the rest logged."""

    def __init__(self, log_path: Path, show: Callable[[str], None], show_error: Callable[[str], None]):
        self.log_path, self.show, self.show_error = log_path, show, show_error
        self.log = LazyLog(log_path)
        self.logged = 0

    def __call__(self, line: str) -> None:
        if line.startswith(OWN):
            self.show(line[len(OWN):])
        elif line.startswith(OWN_ERROR):
            self.show_error(line[len(OWN_ERROR):])
        else:
            self.log.write(line + "\n")
            self.logged += 1

    def close(self) -> None:
        self.log.close()
