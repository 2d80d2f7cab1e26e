"""Keeps a kernel's routes only if the whole model gets faster with them: the end-to-end check of the route table.

A kernel that beats PyTorch's op alone can still make the model slower: under torch.compile,
Inductor fuses PyTorch's op with its neighbours (a residual add into a norm, a transpose into a
rotary), which a separate kernel prevents, and the copies our launch makes to give the kernel the
contiguous inputs it was verified on cost time too. So, mode by mode (the mode of PyTorch's best first), the
kernels with routes that won alone are tried in the model one at a time, the largest predicted
gain first. Each trial times the routed model and PyTorch's own path in turn (paired runs:
autokernel/verify/variants.py), so that a machine whose speed drifts between runs moves both alike; a
kernel stays routed only if the speedup over PyTorch with it beats the best so far by more than
the noise. A kernel that fails the test loses its routes in that mode, and its records say why.

A trial whose noise is larger than the whole gain the route table predicts cannot tell a win from
a loss: on the GPU, one such trial in a run is often disturbed (both sides 20-35% slower than
PyTorch's path timed alone, the pairs' spread 4-6% against a route worth 2%; an eager trial beside
7 other verifies, session 18: noise 48% against a predicted 37%, where a calm run kept the route at
1.57x). It is timed once more and judged on the second timing alone, whichever way the first went;
at most once, so a selection costs at most twice its trials. A predicted gain under the noise floor (1%) is not timed
again: no timing resolves it, and in the gate of session 16, 18 of 22 second timings were of such
routes (0.0-0.9%), each 10-40 s of a compile-heavy model's verify. The verdict times AutoKernel's best against
PyTorch's best in turn in any case (head_to_head.py), so a second chance here never hands over something slower;
without that figure it claims no more than the speedup the kept trial measured in turn (in_turn, endtoend.choose).

A trial that reads faster than the best so far but within its noise has its pairs taken once more, of the same build
(no second compile), with repeats of latency.LONG_REPEAT_SECONDS, and those decide: 50 ms repeats caught GPU clock
changes one side of a pair (LLaMA 4x1024's linear concatenation on an H200, session 21, four verifies: 1.013x to
1.056x, noise 1.1-4.4%, kept twice and dropped twice).

Under verify --time-limit (deadline.py), a check that would not end in time, with what the verdict needs after it, is
not made: its routes are dropped as unchecked, and its trial says so (timings 0).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

from autokernel.verify import deadline, latency
from autokernel.verify.variants import NOISE_FLOOR, VARIANTS, VariantResult

# mode -> (the record flag it sets, the record times that predict its gain: ours, PyTorch's)
MODES = {"eager": ("route_eager", "ours_us", "pytorch_us"),
         "compiled": ("route_compiled", "ours_gpu_us", "compiled_gpu_us")}


@dataclass
class Trial:
    mode: str
    kernel: str
    variant: str
    ms: float | None
    pytorch_ms: float | None            # PyTorch's own path, timed in turn with it
    speedup: float | None
    best_before: float                  # the speedup over PyTorch to beat
    kept: bool
    why: str
    timings: int = 1                    # 2 when the first was too noisy to tell the predicted gain (module doc); 0 when
                                        # it did not fit in verify's time limit
    noise: float | None = None          # of the speedup (latency.paired_speedup's, at least NOISE_FLOOR)

    def to_json(self) -> dict:
        return asdict(self)


def predicted_gain_us(records: list, mode: str) -> float:
    """Time one forward saves if this kernel's routes in `mode` behave in the model as they did alone."""
    flag, ours, theirs = MODES[mode]
    return sum(r.calls * (getattr(r, theirs) - getattr(r, ours)) for r in records
               if getattr(r, flag) and getattr(r, ours) is not None and getattr(r, theirs) is not None)


def select(mode: str, records: dict[str, list], variant: str, try_variant: Callable[..., VariantResult],
           forget: Callable[[], None], allowed_error: float,
           log: Callable[[str], None], first_cost_s: float = 0.0) -> tuple[VariantResult | None, list[Trial]]:
    """Try each candidate kernel in `mode` in the model; returns the best routed result (None if none kept) and trials.

    records: kernel name -> its route records (their flags are changed in place); try_variant(variant, retime)
    times the model as routed now, paired with PyTorch's own path (result.baseline), and again with long repeats
    where retime(result) says (variants.run); forget() drops the router's cached decisions, so changed flags take
    effect. A check that would not fit in verify's time limit (deadline.py) is not made, and its routes are dropped:
    it is expected to take as long as the longest check so far, or first_cost_s before the first.
    """
    flag = MODES[mode][0]
    candidates = sorted((name for name, rs in records.items() if any(getattr(r, flag) for r in rs)),
                        key=lambda name: -predicted_gain_us(records[name], mode))
    saved = {name: [getattr(r, flag) for r in records[name]] for name in candidates}
    for name in candidates:          # start from PyTorch's path in this mode
        _set(records[name], flag, [False] * len(records[name]))
    best_speedup, best_routed, trials, cost_s = 1.0, None, [], first_cost_s
    for name in candidates:
        out_of_time = deadline.too_late_for(cost_s)
        if out_of_time:
            log(f"end-to-end check of {name}'s {mode} routes: {out_of_time}")
            trials.append(Trial(mode, name, variant, None, None, None, best_speedup, False, out_of_time, 0))
            _drop(records[name], saved[name], mode, out_of_time)
            continue
        started = deadline.now()
        _set(records[name], flag, saved[name])
        forget()
        log(f"end-to-end check of {name}'s {mode} routes ({VARIANTS[variant][0]}, paired with PyTorch's own)")
        def close_call(result: VariantResult, best: float = best_speedup) -> bool:
            kept, speedup, _, _ = _judge(result, best, allowed_error)
            return not kept and speedup is not None and speedup > best
        result = try_variant(variant, close_call)
        kept, speedup, why, noise = _judge(result, best_speedup, allowed_error)
        timings = 1
        gain = _predicted_fraction(records[name], mode, result)
        if noise is not None and gain is not None and noise > gain >= NOISE_FLOOR:
            log(f"end-to-end check of {name}'s {mode} routes, timed again: its noise ({noise:.1%}) is larger than "
                f"the gain the route table predicts ({gain:.1%}); {why}")
            result = try_variant(variant, close_call)
            (kept, speedup, why, noise), timings = _judge(result, best_speedup, allowed_error), 2
        trials.append(Trial(mode, name, variant, result.ms, result.baseline.median_ms if result.baseline else None,
                            speedup, best_speedup, kept, why, timings, noise))
        cost_s = max(cost_s, deadline.now() - started)
        if kept:
            best_speedup, best_routed = speedup, result
            continue
        _drop(records[name], saved[name], mode, why)
    forget()
    return best_routed, trials


def unchecked(trials: list[dict]) -> int:
    """How many kernels' routes (per mode) were left out by verify's time limit, from the trials' JSON (timings 0)."""
    return len({(t["mode"], t["kernel"]) for t in trials if t.get("timings") == 0})


def _drop(records: list, was_routed: list[bool], mode: str, why: str) -> None:
    """A kernel's routes in `mode` off, each that was on saying why."""
    _set(records, MODES[mode][0], [False] * len(records))
    for record, routed in zip(records, was_routed):
        if routed:
            record.why += f"; {mode} route dropped end to end: {why}"


def in_turn(trials: list[Trial]) -> tuple[float, float] | None:
    """The speedup over PyTorch's own path of what a mode's selection kept, and its noise, as timed in turn (the last
    kept trial's: each kept trial beats the one before); None when nothing was kept."""
    kept = [trial for trial in trials if trial.kept and trial.speedup is not None]
    return (kept[-1].speedup, kept[-1].noise or NOISE_FLOOR) if kept else None


def _predicted_fraction(records: list, mode: str, result: VariantResult) -> float | None:
    """The gain the route table predicts for these routes, as a fraction of PyTorch's own forward in this trial;
    None without a prediction (no baseline, or routes with no time of their own: a rewrite, verify/rewrites.py)."""
    _, ours, theirs = MODES[mode]
    timed = any(getattr(r, ours) is not None and getattr(r, theirs) is not None for r in records)
    if not timed or result.baseline is None or result.baseline.median_ms <= 0:
        return None
    return predicted_gain_us(records, mode) / (result.baseline.median_ms * 1000)


def _judge(result: VariantResult, best_speedup: float,
           allowed_error: float) -> tuple[bool, float | None, str, float | None]:
    """Whether this trial beats the best speedup over PyTorch so far by more than the noise, why, and the noise.

    The speedup and its noise come from the paired repeats (latency.paired_speedup): each repeat of
    ours is set against PyTorch's repeat taken right beside it, so a machine whose speed drifts
    during the trial widens neither. Without paired repeats, the medians and the larger spread."""
    if result.ms is None or result.baseline is None:
        return False, None, result.failed or "could not be timed", None
    if result.error is None or result.error > allowed_error:
        return False, None, f"output error {result.error:.3g} over {allowed_error:g}", None
    paired = latency.paired_speedup(result.latency, result.baseline)
    if paired is not None:
        speedup, measured = paired
        how = latency.noise_words(result.latency.repeats) + (
            "" if not result.retimed else ", taken again, longer: the short ones read faster within their noise")
    else:
        speedup, how = result.baseline.median_ms / result.ms, "of the repeats"
        measured = max(result.latency.spread, result.baseline.spread)
    noise = max(NOISE_FLOOR, measured)
    kept = speedup > best_speedup * (1 + noise)
    return kept, speedup, (f"{'faster' if kept else 'not faster'}: {speedup:.3f}x PyTorch's own path, timed in turn "
                           f"(to beat: {best_speedup:.3f}x, noise {noise:.1%}: {how}; {result.ms:.3f} ms against "
                           f"{result.baseline.median_ms:.3f})"), noise


def _set(records: list, flag: str, values: list[bool]) -> None:
    for record, value in zip(records, values):
        setattr(record, flag, value)
