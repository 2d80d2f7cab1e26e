"""Which kernel calls the end-to-end error check really checked, and, for every kernel that took none, why.

The check routes every verified call and compares the model's output with the original's. A kernel
that took no call (every call fell back, "shape ... not verified", or its region is not in the
model's graph) was not checked at all: its output never reached the model's. When no kernel took a
call, the matching outputs say nothing about the kernels, so verify must not call that a PASS
(verification.EXIT_NOTHING_CHECKED).
"""

from __future__ import annotations

from dataclasses import dataclass

from autokernel.core.live import plural


@dataclass(frozen=True)
class Coverage:
    """The calls the check routed (one forward pass, every verified call routed) and the kernels it never ran."""
    calls_checked: int
    not_checked: list[str]           # one line per kernel that took no call: its name and why

    @property
    def nothing(self) -> bool:
        return self.calls_checked == 0


def coverage(checked: dict) -> Coverage:
    """The coverage of the check from the router's summary in it (the report's `checked` section)."""
    regions = {region["name"]: region for region in checked.get("regions") or []}
    calls, missed = 0, []
    for kernel in checked.get("kernels") or []:
        hits = kernel.get("hits") or 0
        calls += hits
        if hits == 0:
            missed.append(f"{kernel['name']}: {_why_no_call(kernel, regions.get(kernel['name']))}")
    return Coverage(calls, missed)


def _why_no_call(kernel: dict, region: dict | None) -> str:
    reasons = kernel.get("fallback_reasons") or {}
    fallbacks = kernel.get("fallbacks") or 0
    if fallbacks:
        listed = "; ".join(f"{reason} ({count}x)" for reason, count in list(reasons.items())[:3])
        return f"its {plural(fallbacks, 'call')} fell back to PyTorch" + (f": {listed}" if listed else "")
    if region is not None and not region.get("found"):
        return "its region is not in the model's graph"
    return "the model made no call it could take"
