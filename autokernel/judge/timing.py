"""Timing: the timed call (one for the kernel, in its worker, and one for PyTorch, in the judge),
the judge's checks on the kernel's timings, roofline figures and the speed-of-light rule.

A timed call on a GPU: wait until the device is idle, flush the L2 cache (a 512 MiB write), keep
the device busy a little longer where the call's host time needs it (the pad, below), record an
event, call the function, record an event, wait until the device is idle again. The latency is the
median over calls of the time between the two events, as triton.testing.do_bench measures it: the
host's launch overhead overlaps the flush and the pad, so the events hold the GPU's work alone. Around each call the worker tells the
judge when it starts and when the device is idle again, so the judge brackets every call with its
own clock. Under the CPU interpreter there is nothing meaningful to time: the figures are
wall-clock times, computed so the pipeline runs end to end, and every report labels them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from autokernel.core.hardware import GPUSpec
from autokernel.kernel_types.base import KernelType, Shape
from autokernel.kernel_types.registry import dtype_size

# The flush before each timed call: twice triton.testing.do_bench's, so that the host's time in
# kernel_fn (its launches, and the worker's guard on every PyTorch op) overlaps it up to about
# 0.1 ms on an H100 or H200 instead of showing in the events.
FLUSH_BYTES = 512 * 1024 * 1024
# Speed of light: a datasheet compute peak can be beaten a little by boost clocks, and up to the
# L2's size of an output can still sit in the cache when the timer stops, so the bandwidth floor
# gets more room than the compute floor.
COMPUTE_MARGIN = 1.25
BANDWIDTH_MARGIN = 2.0
# Timing checks on a GPU (medians over the timed calls, in ms).
FLUSH_OVERLAP_RATIO = 1.25          # the flush before a call slowed down by work that overlapped it
FLUSH_OVERLAP_SLACK_MS = 0.02
HIDDEN_WORK_SLACK_MS = 0.05         # device busy after the call beyond what the events saw
HIDDEN_WORK_RATIO = 0.5
# The pad: when a call's host time (its launches, plus the worker's guards on every PyTorch op) is
# longer than the flush, the GPU would sit idle between the start event and the first launch, and
# that wait would count as the kernel's time. On an H100 the worker's host time was 250 us for a
# softmax call whose GPU work is 12 us, after a 160 us flush: the events read 124 us. So the judge
# sizes a GPU sleep (torch.cuda._sleep, after the flush, before the start event) to cover
# PAD_HOST_COVER times the host time seen in the warm-up calls, and checks it like the flush.
PAD_HOST_COVER = 1.5
PAD_SLACK_MS = 0.02
MAX_PAD_MS = 20.0
PAD_OVERLAP_RATIO = 1.10


class Clock:
    """The primitives a timed call uses, bound once: in the worker, before the kernel file is imported.

    Later replacements of time.perf_counter, torch.cuda.Event or torch.cuda.synchronize do not
    reach a Clock that already exists.
    """

    def __init__(self, device: torch.device):
        self.on_gpu = device.type == "cuda"
        self.perf = time.perf_counter
        if self.on_gpu:
            self.sync = torch._C._cuda_synchronize
            self.stream = torch.cuda.current_stream(device)
            self.record = torch.cuda.Event.record
            self.elapsed = torch.cuda.Event.elapsed_time
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            self.zero_ = (getattr(torch._C, "TensorBase", None) or torch._C._TensorBase).zero_
            self.flush_buffer = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
            self.sleep = torch.cuda._sleep
        else:
            self.sync = _nothing
        self._cycles_per_ms: float | None = None

    def cycles_per_ms(self) -> float:
        """GPU clock cycles per ms of torch.cuda._sleep, measured once (median of three)."""
        if self._cycles_per_ms is None:
            cycles, samples = 1_000_000, []
            start, end = self.events[0], self.events[1]
            for _ in range(3):
                self.sync()
                self.record(start, self.stream)
                self.sleep(cycles)
                self.record(end, self.stream)
                self.sync()
                samples.append(cycles / max(self.elapsed(start, end), 1e-6))
            self._cycles_per_ms = statistics.median(samples)
        return self._cycles_per_ms

    def pad_cycles(self, host_ms: float, flush_ms: float) -> int:
        """Sleep cycles that keep the device busy until a call's host work (host_ms) is done; 0 on CPU."""
        if not self.on_gpu:
            return 0
        pad_ms = min(MAX_PAD_MS, PAD_HOST_COVER * host_ms + PAD_SLACK_MS - flush_ms)
        return int(pad_ms * self.cycles_per_ms()) if pad_ms > 0 else 0


def _nothing():
    return None


def timed_call(clock: Clock, fn, kwargs: dict, on_start=None, on_idle=None, pad_cycles: int = 0):
    """One timed call of fn(**kwargs); returns (output, record) with times in ms.

    on_start runs once the device is idle, just before the clock starts, and on_idle as soon as
    the device is idle again after the call (the worker uses them to tell the judge, which
    brackets the call with its own clock). The record has host_ms (until fn returned), launch_ms
    (fn alone, from its call to its return: what the host pays per call), wall_ms (until the device
    was idle again), kernel_ms (the events around fn; host time on CPU) and, on a GPU, flush_ms
    (the flush and the pad of pad_cycles, see Clock.pad_cycles, together).
    """
    clock.sync()
    if on_start is not None:
        on_start()
    start = clock.perf()
    if clock.on_gpu:
        before_flush, after_flush, after_call = clock.events
        clock.record(before_flush, clock.stream)
        clock.zero_(clock.flush_buffer)
        if pad_cycles > 0:
            clock.sleep(pad_cycles)
        clock.record(after_flush, clock.stream)
    called = clock.perf()
    output = fn(**kwargs)
    returned = clock.perf()
    if clock.on_gpu:
        clock.record(after_call, clock.stream)
    clock.sync()
    idle = clock.perf()
    if on_idle is not None:
        on_idle()
    record = {"host_ms": (returned - start) * 1e3, "launch_ms": (returned - called) * 1e3,
              "wall_ms": (idle - start) * 1e3}
    if clock.on_gpu:
        record["flush_ms"] = clock.elapsed(before_flush, after_flush)
        record["kernel_ms"] = clock.elapsed(after_flush, after_call)
    else:
        record["kernel_ms"] = record["host_ms"]
    return output, record


LAUNCH_FLOOR_CALLS = 20


def launch_floor_ms(clock: Clock, device: torch.device) -> float | None:
    """The GPU time of the smallest launch, timed as a kernel's call is (flushed, between the same events):
    one element zeroed, one PyTorch kernel of one program. No kernel_fn that launches can take less, so it is
    the floor a latency-bound shape's headroom is measured against (autokernel/judge/limits.py). None on CPU."""
    if not clock.on_gpu:
        return None
    one = torch.zeros(1, device=device)
    return _median([timed_call(clock, _zero, {"tensor": one})[1]["kernel_ms"] for _ in range(LAUNCH_FLOOR_CALLS)])


def _zero(tensor: torch.Tensor) -> None:
    tensor.zero_()


def median_latency_ms(fn, on_gpu: bool, *, quick: bool = False) -> float:
    """Median latency of fn() with the L2 flushed (triton.testing.do_bench); used by verify.py."""
    if on_gpu:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=10 if quick else 25, rep=40 if quick else 100,
                                             return_mode="median"))
    fn()  # warm-up: the interpreter's first call pays for tracing
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


# --------------------------------------------------------------------------- the judge's timing checks
@dataclass
class TimedCall:
    """What the worker reported for one timed call, and the judge's own clock around it."""
    record: dict
    bracket_ms: float             # the judge's clock: from the worker's "started" to its "idle"
    proof_ms: float = 0.0         # the judge's clock: from its request (fresh seed) to the proof's reply
    sample: tuple = ()            # the output's elements at the positions the judge chose, in that reply
    cpu_ms: float | None = None   # the CPU time of the worker's processes over proof_ms's span, where it counts all
    #                               their work (judge/worker_cpu.py says when it does not); None elsewhere


def busy_ms(call: TimedCall) -> float:
    """The least time the judge's clocks allow a call's bracket: its wall clock from request to proof or, where it is
    less, the CPU time the worker's processes used over the same span. On a machine shared with other jobs the wall
    clock also counts each process's waits for a core as it wakes (several a call, milliseconds each on two loaded
    cores): no work is done in them, and the CPU clock does not count them."""
    return call.proof_ms if call.cpu_ms is None else min(call.proof_ms, call.cpu_ms)


def _median(values) -> float:
    return statistics.median(values) if values else 0.0


def call_ms(record: dict) -> float:
    """What one call costs a model that launches op after op: its GPU time or, where the host takes
    longer to launch it than the GPU to run it (small shapes), the host's time. bench.py reports it
    as call_latency_us; the speedups use GPU time (docs/notes/objective.md says why)."""
    return max(record["kernel_ms"], record.get("launch_ms", 0.0))


def hidden_work_ms(call: TimedCall) -> float:
    """Time the judge saw the call take beyond what the worker's events and host clock account for."""
    r = call.record
    accounted = max(r.get("flush_ms", 0.0) + r["kernel_ms"], r["host_ms"])
    return call.bracket_ms - accounted


def timing_problem(calls: list[TimedCall], empty_calls: list[TimedCall], flush_ms: float | None,
                   pad_ms: float = 0.0) -> str | None:
    """Why the kernel's timings cannot be trusted, or None.

    calls are the timed calls of kernel_fn; empty_calls are timed calls of a function that does
    nothing, made the same way in the same worker (they measure the bracket's own overhead);
    flush_ms is the judge's own measurement of the flush and pad_ms of the pad the calls were
    given (flush_ms None on CPU, where these checks do not apply: the interpreter runs everything
    synchronously, and threads are checked in the worker).
    """
    if flush_ms is None or not calls:
        return None
    kernel = _median([c.record["kernel_ms"] for c in calls])
    flush_seen = _median([c.record["flush_ms"] for c in calls])
    expected = flush_ms + pad_ms
    if flush_seen > FLUSH_OVERLAP_RATIO * flush_ms + PAD_OVERLAP_RATIO * pad_ms + FLUSH_OVERLAP_SLACK_MS:
        return (f"the cache flush before each timed call took {flush_seen * 1e3:.1f} us instead of "
                f"{expected * 1e3:.1f} us: work the timer does not wait for (a side stream) overlapped it")
    overhead = _median([hidden_work_ms(c) for c in empty_calls])
    hidden = _median([hidden_work_ms(c) for c in calls]) - overhead
    if hidden > HIDDEN_WORK_SLACK_MS + HIDDEN_WORK_RATIO * kernel:
        return (f"the device stayed busy {hidden * 1e3:.1f} us per call after the timer's events said "
                f"{kernel * 1e3:.1f} us: kernel_fn left work running that the timer does not wait for "
                "(a side stream or a thread); launch on torch.cuda.current_stream()")
    return None


# The judge's own bound, on every device. Each timed call's inputs come from a seed the judge draws at random and
# sends with its request, and the call's reply is followed at once by a proof: elements of its output at positions
# the judge chose. So the work was done between the request and the proof's reply, on the judge's clocks (busy_ms:
# the wall clock, or the worker's CPU time over the span where that counts all its work), whatever the worker
# reports. Less the same bracket around calls of nothing (empty calls: the same drawing, flush, pad, messages and
# proof), that bounds the call's time from below; the worker's figure (the events on a GPU) refines it only above
# half that bound, less a slack for the host checks and the jitter of a shared machine.
PROOF_RATIO = 2.0
PROOF_SLACK_MS = {False: 0.5, True: 0.1}            # CPU, GPU
# The empty calls run in the candidate's process, which could slow them to hide work: their cost is taken no
# higher than this many times what the judge's own drawing of the same inputs (and its own flush and pad) costs.
OVERHEAD_COVER = 3.0
# Off on a GPU until calibrated there. On an H200 (session 12) the honest softmax starter at 8192 x 8192 (68 us a
# call on the events) took 0.34-0.54 ms more per checked call on this clock than the empty calls did, and failed
# this rule in 3 of 5 runs, while forgers reporting 1-31 us showed 0.38-0.40 ms: the bracket's unexplained share is
# as large as the gap it must see. On a GPU the events stay bounded by the judge's older checks (timing_problem),
# and the fresh seed still refuses work done before the judge's request.
PROOF_ON_GPU = False
OVERHEAD_SLACK_MS = {False: 2.0, True: 0.2}


def wall_ms(call: TimedCall) -> float:
    return call.proof_ms


def bracket_overhead_ms(empty_calls: list[TimedCall], own_ms: float, on_gpu: bool, clock=busy_ms) -> float:
    """What the judge's clock (wall_ms or busy_ms) around a call costs by itself: the fastest empty call (the one a
    busy machine delayed least), capped from the judge's own measurement (own_ms) so that a candidate cannot hide
    work in slow empty calls."""
    cap = OVERHEAD_COVER * own_ms + OVERHEAD_SLACK_MS[on_gpu]
    return min([clock(c) for c in empty_calls] + [cap])


def proof_problem(checked: list[TimedCall], empty_calls: list[TimedCall], own_ms: float, on_gpu: bool) -> str | None:
    """A FAIL message when the worker's times for the checked calls are far below the judge's own clock, else None.

    The bound is the fastest checked call less the bracket's cost (the fastest empty call), both on one clock: each
    call's work is in its own proof, and the fastest is the one the machine's other work delayed least. It is taken
    on the wall clock and on busy_ms, and the lesser counts: a checked call whose CPU time was withheld is on the
    wall clock in busy_ms too, and less an empty call's CPU time it would be judged more strictly than the wall
    clock alone would judge it. The worker's figure is its median: moving it takes forging most calls."""
    if not checked or on_gpu and not PROOF_ON_GPU:
        return None
    bound = min(min(clock(c) for c in checked) - bracket_overhead_ms(empty_calls, own_ms, on_gpu, clock)
                for clock in (wall_ms, busy_ms))
    reported = _median([c.record["kernel_ms"] for c in checked])
    if reported >= bound / PROOF_RATIO - PROOF_SLACK_MS[on_gpu]:
        return None
    return (f"the kernel's process reported {reported * 1e3:.1f} us per call, but on the judge's own clock every "
            f"call took at least {bound * 1e3:.1f} us beyond the timing's own cost (from the request with its fresh inputs "
            "to the proof of the output): the kernel's process did not time the work it did")


# --------------------------------------------------------------------------- roofline and speed of light
@dataclass
class Roofline:
    bytes_moved: float
    flops: float
    bound: str                    # "memory" or "compute"
    throughput: float             # GB/s when memory-bound, TFLOP/s when compute-bound
    unit: str
    pct_peak: float | None        # None when the peak is unknown (CPU)


def roofline(kt: KernelType, shapes: list[Shape], dtype: torch.dtype, latency_ms: float, gpu: GPUSpec) -> Roofline:
    """Place total work over total time on the roofline of this GPU."""
    elem = dtype_size(dtype)
    total_bytes = sum(kt.bytes_moved(s, elem) for s in shapes)
    total_flops = sum(kt.flops(s) for s in shapes)
    ridge = gpu.ridge_point(dtype)
    compute_bound = ridge is not None and total_flops / max(total_bytes, 1.0) > ridge
    seconds = latency_ms / 1e3
    if compute_bound:
        throughput = total_flops / seconds / 1e12
        peak = gpu.peak_tflops(dtype)
        return Roofline(total_bytes, total_flops, "compute", throughput, "TFLOP/s",
                        100 * throughput / peak if peak else None)
    throughput = total_bytes / seconds / 1e9
    peak = gpu.mem_bandwidth_gbs
    return Roofline(total_bytes, total_flops, "memory", throughput, "GB/s", 100 * throughput / peak if peak else None)


def speed_of_light_skipped(gpu: GPUSpec) -> str | None:
    """Why the speed-of-light check cannot run on this device, or None when it can."""
    if not gpu.is_gpu:
        return "no GPU: the CPU interpreter has no hardware peak to check against"
    if gpu.estimated:
        return f"the peaks of {gpu.name} are estimates, not datasheet figures"
    return None


def speed_of_light_ms(kt: KernelType, shape: Shape, dtype: torch.dtype, gpu: GPUSpec) -> float:
    """The least time one call can take on this GPU, with the margins above.

    Compute is held to the GPU's fastest listed rate whatever the dtype (a float32 kernel may use
    tensor cores and still be accurate), bandwidth to the datasheet peak.
    """
    rates = [r for r in (gpu.fp16_tflops, gpu.bf16_tflops, gpu.fp32_tflops) if r]
    compute_s = kt.flops(shape) / (max(rates) * 1e12) / COMPUTE_MARGIN if rates else 0.0
    memory_s = kt.bytes_moved(shape, dtype_size(dtype)) / (gpu.mem_bandwidth_gbs * 1e9) / BANDWIDTH_MARGIN
    return max(compute_s, memory_s) * 1e3


def speed_of_light_problem(kt: KernelType, shape: Shape, dtype: torch.dtype, latency_ms: float,
                           gpu: GPUSpec) -> str | None:
    """A FAIL message when latency_ms is faster than the hardware allows, else None."""
    if speed_of_light_skipped(gpu):
        return None
    floor = speed_of_light_ms(kt, shape, dtype, gpu)
    if latency_ms >= floor:
        return None
    return (f"measured {latency_ms * 1e3:.2f} us, faster than the hardware allows: moving "
            f"{kt.bytes_moved(shape, dtype_size(dtype)) / 1e6:.1f} MB and doing {kt.flops(shape) / 1e9:.2f} GFLOP "
            f"takes at least {floor * 1e3:.2f} us on {gpu.name} (peaks {gpu.mem_bandwidth_gbs:g} GB/s, "
            f"{max(r for r in (gpu.fp16_tflops, gpu.bf16_tflops, gpu.fp32_tflops) if r):g} TFLOP/s, with margins); "
            "the timer did not see the kernel's work")
