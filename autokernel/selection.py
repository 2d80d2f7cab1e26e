"""Keeps a kernel's routes only if the whole model gets faster with them: the end-to-end check of the route table.

A kernel that beats PyTorch's op alone can still make the model slower: under torch.compile,
Inductor fuses PyTorch's op with its neighbours (a residual add into a norm, a transpose into a
rotary), which a separate kernel prevents, and the copies our launch makes to give the kernel the
contiguous inputs it was verified on cost time too. So, mode by mode (eager, and compiled), the
kernels with routes that won alone are tried in the model one at a time, the largest predicted
gain first; a kernel stays routed only if the model with it is faster than the best so far by more
than the noise. A kernel that fails the test loses its routes in that mode, and its route records
say why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from autokernel.variants import VARIANTS, VariantResult, faster_than

# mode -> (the record flag it sets, the record times that predict its gain: ours, PyTorch's)
MODES = {"eager": ("route_eager", "ours_us", "pytorch_us"),
         "compiled": ("route_compiled", "ours_gpu_us", "compiled_gpu_us")}


@dataclass
class Trial:
    mode: str
    kernel: str
    variant: str
    ms: float | None
    best_before_ms: float
    kept: bool
    why: str

    def to_json(self) -> dict:
        return asdict(self)


def predicted_gain_us(records: list, mode: str) -> float:
    """Time one forward saves if this kernel's routes in `mode` behave in the model as they did alone."""
    flag, ours, theirs = MODES[mode]
    return sum(r.calls * (getattr(r, theirs) - getattr(r, ours)) for r in records
               if getattr(r, flag) and getattr(r, ours) is not None and getattr(r, theirs) is not None)


def select(mode: str, records: dict[str, list], baseline: VariantResult, variant: str,
           try_variant: Callable[[str], VariantResult], forget: Callable[[], None], allowed_error: float,
           log: Callable[[str], None]) -> tuple[VariantResult | None, list[Trial]]:
    """Try each candidate kernel in `mode` in the model; returns the best routed result (None if none kept) and trials.

    records: kernel name -> its route records (their flags are changed in place); baseline: PyTorch's
    result in the same mode; try_variant(variant) times the model as routed now; forget() drops the
    router's cached decisions, so changed flags take effect.
    """
    flag = MODES[mode][0]
    candidates = sorted((name for name, rs in records.items() if any(getattr(r, flag) for r in rs)),
                        key=lambda name: -predicted_gain_us(records[name], mode))
    saved = {name: [getattr(r, flag) for r in records[name]] for name in candidates}
    for name in candidates:          # start from PyTorch's path in this mode
        _set(records[name], flag, [False] * len(records[name]))
    best, best_routed, trials = baseline, None, []
    for name in candidates:
        _set(records[name], flag, saved[name])
        forget()
        log(f"end-to-end check of {name}'s {mode} routes ({VARIANTS[variant][0]})")
        result = try_variant(variant)
        correct = result.error is not None and result.error <= allowed_error
        kept, why = faster_than(result, best) if correct and result.ms is not None else (
            False, result.failed or f"output error {result.error:.3g} over {allowed_error:g}")
        trials.append(Trial(mode, name, variant, result.ms, best.ms, kept, why))
        if kept:
            best, best_routed = result, result
            continue
        _set(records[name], flag, [False] * len(records[name]))
        for record, was_routed in zip(records[name], saved[name]):
            if was_routed:
                record.why += f"; {mode} route dropped end to end: {why}"
    forget()
    return best_routed, trials


def _set(records: list, flag: str, values: list[bool]) -> None:
    for record, value in zip(records, values):
        setattr(record, flag, value)
