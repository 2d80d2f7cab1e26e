"""What verify does with a failure: the smallest unit that failed is dropped, with its reason, and the rest goes on.

A model no one here wrote breaks things in places no test foresaw: a region whose starter Inductor cannot
generate, a kernel file that does not import, a route whose rewrite breaks the model's graph, a timing that
raises. Each such failure costs only its own unit (a starter, a kernel, a route, a figure): the unit becomes a
Dropped record, shown in the report and in `score`'s and the zoo's tables, and verify goes on to a verdict,
PyTorch's best at the least. The exit code then says "verified, with failures dropped" (verification.EXIT_DROPPED)
rather than "verified". What cannot be contained in a process (a device-side assert kills its CUDA context, a
crash kills it) is contained one level up: verify's parent runs PyTorch's own paths alone in a fresh child
(isolated.py), and drops the kernels with the crash's last lines as the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, TypeVar

T = TypeVar("T")
REASON_CHARS = 400

# The stages a unit can be dropped at, in the order verify meets them.
PROFILE, STARTER, LOAD, REWRITE, CHECK, ROUTE_TABLE, HEADROOM, OVERHEAD, SELECTION, COUNTS, HEAD_TO_HEAD, SANDBOX = (
    "profile", "starter", "load", "rewrite", "check", "route table", "headroom", "overhead", "selection", "counts",
    "head to head", "sandboxed check")


@dataclass(frozen=True)
class Dropped:
    """One unit verify left out: at which stage, which unit (a kernel, a route, a figure), and why."""
    stage: str
    unit: str
    reason: str

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"{self.stage}: {self.unit}: {self.reason}"


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, and the same of its root cause (a
    compiler's wrapper says little: "BackendCompilerFailed: backend='eager_backend' raised:"), bounded."""
    def one(error: BaseException) -> str:
        text = [line for line in str(error).strip().splitlines() if line.strip()]
        return f"{type(error).__name__}: {text[0] if text else ''}".strip()

    root = exc
    while (root.__cause__ or root.__context__) is not None and root is not (root.__cause__ or root.__context__):
        root = root.__cause__ or root.__context__
    reason = one(exc) if root is exc else f"{one(exc)} (caused by {one(root)})"
    return reason[:REASON_CHARS]


class Drops(list):
    """The units dropped so far, in order; `add` also says so on the log."""

    def __init__(self, log: Callable[[str], None] = lambda line: None):
        super().__init__()
        self.log = log

    def add(self, stage: str, unit: str, reason: str | BaseException) -> Dropped:
        dropped = Dropped(stage, unit, describe(reason) if isinstance(reason, BaseException) else reason[:REASON_CHARS])
        self.append(dropped)
        self.log(f"dropped ({dropped.line()})")
        return dropped

    def contained(self, stage: str, unit: str, fn: Callable[[], T], default: T = None) -> T:
        """fn(), or `default` with the unit dropped when it raises (an Exception: Ctrl-C still stops verify)."""
        try:
            return fn()
        except Exception as exc:          # the unit's failure is a finding to report, not the end of verify
            self.add(stage, unit, exc)
            return default

    def to_json(self) -> list[dict]:
        return [dropped.to_json() for dropped in self]
