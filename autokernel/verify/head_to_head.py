"""The verdict's own figure: AutoKernel's best and PyTorch's best, each built as the user would run it, timed in turn.

PyTorch's variants are timed first, AutoKernel's minutes later, and a GPU shared with other work drifts between the
two: in the gates of session 18 (8 verifies to a GPU) the shipped LLaMA read 1.41x apart and 1.08x in turn, and its
next gate read 0.89x apart where its kept routes' trial said 1.10x. So the two bests are built once more and timed
repeat by repeat in turn, and the verdict claims the speedup of those pairs (endtoend.choose).

In turn is not enough where the host is loaded: a path bound by its host (Python, launches, CUDA-graph bookkeeping)
slows with the host for the whole run, one bound by its GPU does not. In session 19's second gate (8 verifies to a
GPU) a Mamba-style scan's PyTorch path, compiled with CUDA graphs, read 0.30 ms in turn against 0.17 for ours (1.64x);
alone, 0.124 against 0.170 (0.73x). So the pair is timed on the GPU's own clock too (latency.gpu_busy), and the
verdict claims the smaller of the two speedups: a win must show on the wall the user waits on and on the GPU.

Each side is its own compiled object, entered through a frame of its own, so Dynamo keeps each one's graphs in a
cache of their own: one object holding both states (the selection's trials) checks one state's guards on the
other's calls, and under CUDA graphs costs up to 2x (MobileNetV3, H200, session 17: 0.618 ms against 0.287). Two
objects in turn cost what each costs alone (session 19, H200: 0.281 and 0.281 ms against 0.285 and 0.279). PyTorch's
side runs with the router bypassed (its patches left in place: MobileNetV3's 34 folds bypassed, 0.280 against
0.279 ms plain), compiled as PyTorch's variant was; ours through the backend its variant was compiled by.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from autokernel.verify import latency
from autokernel.verify.variants import GRAPHED_MODES, VARIANTS, compiled

# Below this apart speedup AutoKernel's best is not timed again, unless its selection kept routes in turn: a pair
# cannot turn 0.8x into a win worth its noise, and the compiles cost (HF T5's eager routes at 0.04x of PyTorch's
# best). Apart figures can be far off (session 19: MobileNetV3's folds kept in turn at 1.23x, timed alone 0.37x).
WORTH_PAIRING = 0.8


# The GPU clock's pairs run as many calls a repeat as fill GPU_REPEAT_S, within these bounds (every call of a repeat is
# queued behind one spin twice as long, so not without end). Session 21, LLaMA 4x1024 alone on an H200, 5 pairs: 10
# calls (66 ms) a repeat spread 6.0% where the wall's 250 ms repeats spread 2.7%. Filling the wall's quarter second
# as well cost about 24 s a verdict at 16 pairs (two thirds of it spin), so half of it.
GPU_REPEAT_S = latency.LONG_REPEAT_SECONDS / 2
GPU_CALLS = (10, 40)


def gpu_calls(host_ms: float) -> int:
    """Calls per repeat of the GPU clock's pairs for a model whose slower side takes host_ms a call."""
    return max(GPU_CALLS[0], min(GPU_CALLS[1], math.ceil(GPU_REPEAT_S * 1e3 / max(host_ms, 1e-3))))


def seconds_needed(host_ms: float, on_gpu: bool) -> float:
    """About how long measure() times a pair whose slower side takes host_ms a call: the wall's pairs (a warm-up, a
    calibrating call and a long repeat each side) and, on a GPU, the GPU clock's (a spin, a warm-up and the calls)."""
    calls = gpu_calls(host_ms)
    wall = 2 * latency.PAIRS * (latency.LONG_REPEAT_SECONDS + 2 * host_ms / 1e3)
    gpu = 2 * latency.PAIRS * (latency.spin_ms(calls, host_ms) + (calls + 1) * host_ms) / 1e3 if on_gpu else 0.0
    return wall + gpu


def worth_pairing(apart_speedup: float, kept_in_turn: bool) -> bool:
    return kept_in_turn or apart_speedup >= WORTH_PAIRING


@dataclass(frozen=True)
class HeadToHead:
    """The two bests timed in turn: the wall's median pair, the median of the per-pair ratios; on a GPU the same in the
    GPU's own time; the speedup the verdict may claim, the smaller of the two, and the larger noise of the two
    (latency.paired_speedup: how far each median stands above its 97.5% lower bound)."""
    ours: str                   # the variants paired
    theirs: str
    # The wall's median pair (latency.median_pair), not each side's own median: where both sides' repeats are
    # bimodal (a 0.1 ms model bound by its host) the two medians can fall in different modes, and the verdict printed
    # "faster by 1.06x" beside 0.148 against 0.127 ms (session 28's gate, KernelBench's deep narrow MLP).
    ours_ms: float
    theirs_ms: float
    speedup: float
    noise: float
    wall_speedup: float | None = None
    ours_gpu_ms: float | None = None
    theirs_gpu_ms: float | None = None
    gpu_speedup: float | None = None
    wall_ratios: tuple[float, ...] = ()        # theirs/ours of each pair, in the order taken (the report shows them)
    gpu_ratios: tuple[float, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)


def frame_of(model, mode: str | None, backend, set_state: Callable[[], None]) -> Callable[..., object]:
    """The model as one side runs it: called as it is (mode None), or torch.compile of a frame of its own whose
    every call first puts the router in this side's state (Dynamo reads that state as a constant, guarded)."""
    if mode is None:
        def eager(*args):
            set_state()
            return model(*args)
        return eager

    def frame(*args):
        return model(*args)
    # Dynamo keeps compiled graphs per code object, and every `frame` made here shares one: a copy of its own each
    frame.__code__ = frame.__code__.replace()
    built = compiled(frame, mode, backend)

    def run(*args):
        set_state()
        return built(*args)
    run.frame = frame           # whose code holds this object's cache entries
    return run


def measure(model, inputs: tuple, router, ours: str, theirs: str, ours_backend, theirs_backend, on_gpu: bool,
            log: Callable[[str], None]) -> HeadToHead | None:
    """Time AutoKernel's variant `ours` (the router as the selection left it) and PyTorch's variant `theirs` (the
    router bypassed) in turn. A side that raises here ran before: the caller drops this figure (containment.py) and
    the verdict keeps the figures timed apart."""
    log(f"timing {VARIANTS[ours][0]} and {VARIANTS[theirs][0]} in turn (the verdict's figure)")

    def set_bypass(state: bool) -> Callable[[], None]:
        return lambda: setattr(router, "bypass", state)
    torch._dynamo.reset()
    try:
        ours_fn = frame_of(model, VARIANTS[ours][2], ours_backend, set_bypass(False))
        theirs_fn = frame_of(model, VARIANTS[theirs][2], theirs_backend, set_bypass(True))

        def ours_call():
            return ours_fn(*inputs)

        def theirs_call():
            return theirs_fn(*inputs)
        with torch.no_grad():
            warmups = 3 if {VARIANTS[ours][2], VARIANTS[theirs][2]} & set(GRAPHED_MODES) else 1
            for _ in range(warmups):       # compiles both, then records their CUDA graphs
                ours_call(), theirs_call()
            ours_latency, theirs_latency = latency.paired(ours_call, theirs_call, on_gpu,
                                                          repeat_seconds=latency.LONG_REPEAT_SECONDS)
        # The lower middle ratio, so that the median pair printed beside it (latency.median_pair) reads the same speedup
        pair = latency.paired_speedup(ours_latency, theirs_latency, statistics.median_low)
        if pair is None:
            return None
        wall, noise = pair
        host_ms = max(ours_latency.median_ms, theirs_latency.median_ms)
        gpu = latency.gpu_busy(ours_call, theirs_call, host_ms, calls=gpu_calls(host_ms)) if on_gpu else None
    finally:
        router.bypass = False
        torch._dynamo.reset()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    # The GPU clock's pairs can be noisy where the host is descheduled longer than the spin (session 19, ResNet-18
    # beside 5 other verifies: 0.254 and 0.216 ms medians, a median pair ratio of 1.02): the noise is the larger
    # of the two clocks'.
    gpu_speedup, gpu_noise = latency.paired_speedup(*gpu) if gpu else (None, 0.0)
    return HeadToHead(ours, theirs, *latency.median_pair(ours_latency, theirs_latency),
                      min(wall, gpu_speedup or wall), max(noise, gpu_noise), wall, gpu and gpu[0].median_ms,
                      gpu and gpu[1].median_ms, gpu_speedup,
                      tuple(round(r, 4) for r in latency.pair_ratios(ours_latency, theirs_latency)),
                      tuple(round(r, 4) for r in latency.pair_ratios(*gpu)) if gpu else ())
