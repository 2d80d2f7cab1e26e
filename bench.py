"""The fixed judge: check a kernel in five correctness stages, then time it against PyTorch.

    python bench.py [--kernel kernel.py] [--shape M=4096,N=4096 ...] [--dtype float16]
                    [--seed N] [--compare-compile] [--quick | --screen] [--json | --json-out FILE]
                    [--result-fd N]

The agent never edits this file. The kernel file never runs in this process: a worker process
(autokernel/judge/candidate/worker.py) imports it and runs kernel_fn when asked, and sends back only outputs and
timings. This process makes its own copy of every input, computes the reference, compares, and
writes the verdict. The stages, in order (the first failure ends the run):
  1. smoke          one small input, twice with fresh values (a cached result fails the second);
  2. shape sweep    the registry's shapes (and any --shape) in float16, bfloat16 and float32 (a region of a
                    model, KERNEL_TYPE region_...: its one shape and dtype, the model's);
  3. stability      adversarial inputs: huge logits, near-zero variance, high dynamic range...;
  4. determinism    the same input three times (the 2nd and 3rd at other addresses) must give bitwise
                    identical, correct outputs;
  5. edge shapes    non-powers of two (1023, 4097, 1537) and size 1.
An output is compared by the one rule of autokernel/judge/correctness.py; where the reference returns a
tuple (torch.max(x, dim)'s values and indices) each of its tensors is, and indices must be exact.
Every call in the worker runs under its guards (autokernel/judge/candidate/worker_guards.py): no PyTorch compute
inside kernel_fn, at least one Triton launch of its own, poisoned allocations in checked calls,
inputs unchanged, a fresh plain tensor returned, no thread left running, no change to torch's
global state or to the worker's timer. Inputs are fresh random values each run; the seed is printed.

Then timing, at the --shape shapes or the registry's timing shape: every timed call gets fresh
inputs written into the same tensors, with the L2 flushed; the median of the calls is the latency.
Timed calls are checked calls: the whole output of a random timed call, the last one and one more
after them, and a random sample of the others' (all, or a random share within a time budget), are
compared with the reference. The judge
brackets every timed call with its own clock, and a time faster than the GPU's roofline allows is
a FAIL. PyTorch eager (and optionally torch.compile) are timed the same way, in this process. Each stage has a time limit; a hang is reported as TIMEOUT.
Exit code: 0 PASS, 1 FAIL, 2 CRASH, 3 TIMEOUT.

Without a GPU the same Triton kernels run through Triton's interpreter on CPU at small shapes,
and the timings are labelled as not meaningful.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # First, before any candidate runs: every module of the judge is compiled from its source and its digest
    # kept, for the verdict (autokernel/judge/judge_files.py). Then, before anything heavy: seal this process and
    # start the kernel's worker, which imports torch, Triton and the kernel file while this process imports
    # its own (autokernel/judge/candidate/worker_process.py).
    from autokernel.judge import judge_files
    judge_files.record_compiled()
    from autokernel.judge.candidate import worker_process
    worker_process.start_early(sys.argv[1:])

import argparse
import contextlib
import json
import os
import random
import secrets
import statistics
import threading
import time
from pathlib import Path

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Judge and worker take turns on small CPU tensors: threads of one spinning while the other works
    # cost more than they give. (The worker runs Triton's interpreter; this process runs no Triton.)
    torch.set_num_threads(1)

from autokernel.core import hardware  # noqa: E402
from autokernel.core.contracts import CRASH, FAIL, PASS, TIMEOUT, VERDICTS  # noqa: E402
from autokernel.core.dtypes import pytorch_fp32_matmul_uses_tf32  # noqa: E402
from autokernel.judge import cuda_launches, limits, timing  # noqa: E402
from autokernel.judge.candidate import worker_process  # noqa: E402
from autokernel.judge.correctness import (DTYPES, CheckFailure, case_inputs, compare_outputs,  # noqa: E402
                                           dtype_name, output_parts, reference_outputs, same_bits)
from autokernel.judge.judge_link import CandidateWorker, WorkerFailure  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from autokernel.sandbox import redact  # noqa: E402

EXIT_CODES = {verdict: code for code, verdict in enumerate(VERDICTS)}     # PASS 0, FAIL 1, CRASH 2, TIMEOUT 3
# Seconds each stage may take before the run is reported as TIMEOUT; the first stage includes
# compilation. The interpreter is two orders of magnitude slower, so it gets more room.
STAGE_LIMITS_S = {"load": 60, "smoke": 60, "shape sweep": 180, "stability": 90, "determinism": 90,
                  "edge shapes": 180, "timing": 240}
INTERPRETER_SLACK = 1 if ON_GPU else 3
# A CUDA C++ kernel file (autokernel/judge/cuda_build.py) compiles while it loads: nvcc and the host compiler
# take about a minute for a new source (none for a cached build), so its load stage gets this much more.
CUDA_BUILD_S = 240
# Timed calls per shape: (fewest, most), full and --quick; the count aims at TIMING_BUDGET_MS of calls.
TIMED_CALLS = {"gpu": {False: (20, 200), True: (10, 60)}, "cpu": {False: (5, 5), True: (3, 3)}}
TIMING_BUDGET_MS = {False: 100.0, True: 40.0}
WARMUP_CALLS = 3 if ON_GPU else 1
SAMPLED_ELEMENTS = 1024                # checked in a timed call whose whole output is not
CHECK_BUDGET_S = {False: 2.0, True: 0.5}   # the judge's time for references of timed calls, about
PICKER = random.SystemRandom()         # what to check: not predictable from the seed
EMPTY_CALLS = 10 if ON_GPU else 0      # timed calls of nothing: the cost of the judge's bracket itself


class Judge:
    """Everything one bench run needs: the worker, the kernel type, the device and the seeds."""

    def __init__(self, worker: CandidateWorker, kt: registry.KernelType, args):
        self.worker = worker
        self.kt = kt
        self.args = args
        self.device = "cuda" if ON_GPU else "cpu"
        self.dtype = DTYPES[args.dtype]
        self.seed = args.seed
        self.case_index = 0

    def next_case(self, shape, dtype, adversarial=None) -> dict:
        self.case_index += 1
        return {"shape": shape, "dtype": dtype_name(dtype), "seed": self.seed + self.case_index,
                "adversarial": adversarial}

    def check(self, shape, dtype, adversarial=None, label="") -> None:
        """One case: the worker runs kernel_fn on it, this process checks the output."""
        case = self.next_case(shape, dtype, adversarial)
        expected, oracle, allowance = reference_outputs(self.kt, case_inputs(self.kt, case, self.device), dtype)
        [output] = self.worker.call(case, parts=len(output_parts(expected)), output_bytes=output_limit(expected))
        try:
            compare_outputs(output, expected, oracle, dtype, self.kt.tolerance_scale, allowance=allowance)
        except CheckFailure as failure:
            where = f"{label + ' ' if label else ''}{registry.format_shape(shape)} {dtype_name(dtype)}"
            raise CheckFailure(f"{where}: {failure}") from None

    def sweep_shapes(self) -> list[dict]:
        shapes = self.kt.sweep if ON_GPU else self.kt.cpu_sweep
        return [shapes[0], shapes[len(shapes) // 2], shapes[-1]] if self.args.quick else list(shapes)

    def edge_shapes(self) -> list[dict]:
        shapes = self.kt.edge_shapes if ON_GPU else self.kt.cpu_edge_shapes
        return shapes[:2] + shapes[-1:] if self.args.quick else list(shapes)

    def stage_dtypes(self) -> list[torch.dtype]:
        """Every dtype; a --screen checks only the run's own, since each dtype compiles a candidate again."""
        return [self.dtype] if self.args.screen else [d for d in DTYPES.values() if self.kt.supports(d)]

    def timing_shapes(self) -> list[dict]:
        if self.args.shape:
            return self.args.shape
        return [self.kt.timing_shape if ON_GPU else self.kt.cpu_sweep[-1]]


def output_limit(expected) -> int:
    """The most bytes an output may have on the wire: the reference's element count in float64, plus room
    (for each of its tensors, where it returns several)."""
    return sum(8 * part.numel() + 1024 for part in output_parts(expected))


# --------------------------------------------------------------------------- the five stages
def stage_smoke(judge: Judge) -> int:
    judge.check(judge.kt.smoke_shape, judge.dtype)
    judge.check(judge.kt.smoke_shape, judge.dtype, label="second call with fresh inputs:")
    return 2


def stage_shape_sweep(judge: Judge) -> int:
    cases = 0
    for dtype in judge.stage_dtypes():
        for shape in judge.sweep_shapes():
            judge.check(shape, dtype)
            cases += 1
    for shape in judge.args.shape:       # the model's real shapes, from an extracted job
        judge.check(shape, judge.dtype, label="job shape")
        cases += 1
    return cases


def stage_stability(judge: Judge) -> int:
    cases = 0
    for adversarial in judge.kt.adversarial:
        shape = {**judge.kt.smoke_shape, **adversarial.shape}
        for dtype in judge.stage_dtypes():
            judge.check(shape, dtype, adversarial.name, label=f"[{adversarial.name}: {adversarial.why}]")
            cases += 1
    return cases


def stage_determinism(judge: Judge) -> int:
    shape = judge.timing_shapes()[0]
    case = judge.next_case(shape, judge.dtype)
    expected, oracle, allowance = reference_outputs(judge.kt, case_inputs(judge.kt, case, judge.device),
                                                    judge.dtype)
    outputs = judge.worker.call(case, repeat=3, parts=len(output_parts(expected)), output_bytes=output_limit(expected))
    where = f"{registry.format_shape(shape)} {judge.args.dtype}"
    for i, output in enumerate(outputs[1:], start=2):
        for first, again in zip(outputs[0], output):
            if same_bits(first, again):
                continue
            if first.shape != again.shape or first.dtype != again.dtype:
                raise CheckFailure(f"{where}: call {i} returned a {tuple(again.shape)} {again.dtype} tensor where "
                                   f"call 1 returned a {tuple(first.shape)} {first.dtype} one")
            diff = (first.double() - again.double()).abs()
            raise CheckFailure(f"{where}: call {i} differs from call 1 on the same input values at another address "
                               f"({int((diff != 0).sum())} elements, max difference {float(diff.max()):.3g}); look "
                               "for atomics, a race, or a choice made from a data pointer")
    try:
        compare_outputs(outputs[0], expected, oracle, judge.dtype, judge.kt.tolerance_scale, allowance=allowance)
    except CheckFailure as failure:
        raise CheckFailure(f"{where}: {failure}") from None
    return 3


def stage_edge_shapes(judge: Judge) -> int:
    cases = 0
    for dtype in judge.stage_dtypes():
        for shape in judge.edge_shapes():
            judge.check(shape, dtype)
            cases += 1
    return cases


STAGES = [("smoke", stage_smoke), ("shape sweep", stage_shape_sweep), ("stability", stage_stability),
          ("determinism", stage_determinism), ("edge shapes", stage_edge_shapes)]


# --------------------------------------------------------------------------- timing
def timed_call_count(warmup: list[timing.TimedCall], quick: bool) -> int:
    fewest, most = TIMED_CALLS["gpu" if ON_GPU else "cpu"][quick]
    per_call = statistics.median(c.record["wall_ms"] for c in warmup) if warmup else 1.0
    return max(fewest, min(most, int(TIMING_BUDGET_MS[quick] / max(per_call, 1e-3))))


def time_candidate(judge: Judge, shape: dict, clock: timing.Clock,
                   flush_ms: float | None) -> tuple[list[timing.TimedCall], int]:
    """Timed calls of kernel_fn in the worker, each on fresh inputs in the same tensors, and checked.

    After each call returned, the judge picks what to check, so the kernel cannot tell a checked
    call from any other: the whole output of a random timed call, of the last one and of one more
    after them, and SAMPLED_ELEMENTS elements at random of every other, or of a random share of
    them where references for all would cost more than CHECK_BUDGET_S. Returns the timed calls and
    the pad they were given: GPU sleep cycles after the flush, sized from the warm-up calls' host
    time so the events do not count the device waiting for the host (timing.Clock.pad_cycles).
    """
    kt, worker = judge.kt, judge.worker
    case = judge.next_case(shape, judge.dtype)
    first = kt.reference(**case_inputs(kt, case, judge.device))
    worker.time_begin(case, parts=len(output_parts(first)))
    limit = output_limit(first)
    calls = [worker.iterate(case["seed"] + i) for i in range(WARMUP_CALLS)]
    pad = clock.pad_cycles(statistics.median(c.record["host_ms"] for c in calls), flush_ms) if flush_ms else 0
    count = timed_call_count(calls, judge.args.quick)
    whole = {WARMUP_CALLS + PICKER.randrange(count), WARMUP_CALLS + count - 1, WARMUP_CALLS + count}
    timed, rate, checks, checking_s = [], 1.0, 0, 0.0
    for i in range(WARMUP_CALLS, WARMUP_CALLS + count + 1):
        seed = case["seed"] + i
        call = worker.iterate(seed, pad)
        if i < WARMUP_CALLS + count:
            timed.append(call)
        if i not in whole and PICKER.random() >= rate:
            continue
        which = (f"timed call {i - WARMUP_CALLS + 1} of {count}" if i < WARMUP_CALLS + count
                 else f"the call after the {count} timed calls")
        started = time.monotonic()
        expected, oracle, allowance = reference_outputs(kt, case_inputs(kt, {**case, "seed": seed}, judge.device),
                                                        judge.dtype)
        try:
            if i in whole:
                compare_outputs(worker.last_output(limit), expected, oracle, judge.dtype, kt.tolerance_scale,
                                allowance=allowance)
            else:
                positions = [sorted(PICKER.sample(range(part.numel()), min(SAMPLED_ELEMENTS, part.numel())))
                             for part in output_parts(expected)]
                compare_outputs(worker.sample(positions), expected, oracle, judge.dtype, kt.tolerance_scale,
                                positions=[torch.tensor(p, dtype=torch.int64) for p in positions],
                                allowance=allowance)
        except CheckFailure as failure:
            raise CheckFailure(
                f"{registry.format_shape(shape)} {judge.args.dtype}: {which} returned a wrong result ({failure}). "
                "Every timed call gets fresh inputs written into the same tensors, and this kernel passed the "
                "same checks before timing: it changes behaviour with the call count, the call stack or the "
                "timing phase (a stale or cached output, for example one keyed by the input's address)") from None
        checks, checking_s = checks + 1, checking_s + time.monotonic() - started
        rate = min(1.0, CHECK_BUDGET_S[judge.args.quick] / (checking_s / checks * (count + 1)))
    return timed, pad


def time_reference(judge: Judge, fn, shape: dict, count: int, clock: timing.Clock,
                   flush_ms: float | None) -> tuple[float, float]:
    """Median ms of fn (PyTorch's) in this process, timed exactly as the kernel is (fresh inputs each
    call, padded from its own warm-up host time): (GPU time, call time; see timing.call_ms)."""
    case = judge.next_case(shape, judge.dtype)
    inputs = case_inputs(judge.kt, case, judge.device)
    records, warmup = [], []
    for i in range(WARMUP_CALLS + count):
        fresh = case_inputs(judge.kt, {**case, "seed": case["seed"] + i}, judge.device)
        for name, tensor in inputs.items():
            if isinstance(tensor, torch.Tensor):
                tensor.copy_(fresh[name])
        pad = (clock.pad_cycles(statistics.median(r["host_ms"] for r in warmup), flush_ms)
               if flush_ms and i >= WARMUP_CALLS else 0)
        _, record = timing.timed_call(clock, fn, inputs, pad_cycles=pad)
        (records if i >= WARMUP_CALLS else warmup).append(record)
    return (statistics.median(r["kernel_ms"] for r in records),
            statistics.median(timing.call_ms(r) for r in records))


def compiled_time(judge: Judge, compiled_ref, shape: dict, count: int, clock: timing.Clock,
                  flush_ms: float | None) -> float | None:
    """torch.compile's GPU time, or None where torch.compile cannot build PyTorch's own op here (the
    bar is then eager alone): a compiler failure says nothing against the kernel."""
    try:
        return time_reference(judge, compiled_ref, shape, count, clock, flush_ms)[0]
    except Exception as exc:
        print(f"torch.compile of the reference failed at {registry.format_shape(shape)}: "
              f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", file=sys.stderr)
        return None


def padded_flush_ms(clock: timing.Clock, pad_cycles: int) -> float:
    """The judge's own measurement of the flush followed by a pad of pad_cycles (median of five)."""
    return statistics.median(timing.timed_call(clock, lambda: None, {}, pad_cycles=pad_cycles)[1]["flush_ms"]
                             for _ in range(5))


def time_kernel(judge: Judge) -> dict:
    """Time the kernel, PyTorch eager and (with --compare-compile) torch.compile at the timing shapes.

    latency_us and the speedups are GPU time (the events around the call, L2 flushed, padded so the
    device never waits for the host inside them: timing.Clock.pad_cycles).
    call_latency_us is the call as a model's host pays it too (timing.call_ms): reported, not yet
    acted on, because inside the judge's worker the host time of a call measured 280-365 us on an
    H100, about 200 us more than the same call in a model (docs/notes/objective.md).
    """
    kt, gpu = judge.kt, hardware.detect()
    clock = timing.Clock(torch.device(judge.device))
    flush_ms = padded_flush_ms(clock, 0) if ON_GPU else None
    floor_ms = timing.launch_floor_ms(clock, torch.device(judge.device))    # reported for the agents, never judged
    empty = [judge.worker.iterate(None) for _ in range(EMPTY_CALLS)]
    compiled_ref = torch.compile(kt.reference) if judge.args.compare_compile else None
    rows, peak_mb = [], None
    for shape in judge.timing_shapes():
        calls, pad = time_candidate(judge, shape, clock, flush_ms)
        where = f"{registry.format_shape(shape)} {judge.args.dtype}"
        problem = timing.timing_problem(calls, empty, flush_ms, padded_flush_ms(clock, pad) - flush_ms if pad else 0.0)
        if problem:
            raise CheckFailure(f"{where}: {problem}")
        ours = statistics.median(c.record["kernel_ms"] for c in calls)
        problem = timing.speed_of_light_problem(kt, shape, judge.dtype, ours, gpu)
        if problem:
            raise CheckFailure(f"{where}: {problem}")
        peaks = [c.record["peak_mb"] for c in calls if "peak_mb" in c.record]
        peak_mb = max([peak_mb or 0.0] + peaks) if peaks else peak_mb
        eager, eager_call = time_reference(judge, kt.reference, shape, len(calls), clock, flush_ms)
        compiled = compiled_time(judge, compiled_ref, shape, len(calls), clock, flush_ms) if compiled_ref else None
        line = timing.roofline(kt, [shape], judge.dtype, ours, gpu)
        rows.append({"shape": registry.format_shape(shape), "latency_us": ours * 1e3,
                     "pytorch_latency_us": eager * 1e3, "compile_latency_us": compiled * 1e3 if compiled else None,
                     "throughput": line.throughput, "unit": line.unit, "pct_peak": line.pct_peak,
                     "call_latency_us": statistics.median(timing.call_ms(c.record) for c in calls) * 1e3,
                     "pytorch_call_latency_us": eager_call * 1e3,
                     "guard_us": statistics.median(c.record.get("guard_ms", 0.0) for c in calls) * 1e3,
                     "timed_calls": len(calls)})
    ours_us = sum(row["latency_us"] for row in rows)
    eager_us = sum(row["pytorch_latency_us"] for row in rows)
    compile_us = sum(row["compile_latency_us"] for row in rows) if all(row["compile_latency_us"] for row in rows) \
        else None
    total = timing.roofline(kt, judge.timing_shapes(), judge.dtype, ours_us / 1e3, gpu)
    compiled = judge.worker.compiled()
    # For the agent only, never the verdict: achieved bandwidth and FLOP/s, bound and occupancy
    # (autokernel/judge/limits.py).
    summary = limits.summarize(kt, judge.dtype, gpu, [(shape, row["latency_us"]) for shape, row in
                                                      zip(judge.timing_shapes(), rows)],
                               compiled, tf32=pytorch_fp32_matmul_uses_tf32(),
                               floor_us=floor_ms * 1e3 if floor_ms else None)
    return {
        "throughput": total.throughput, "throughput_unit": total.unit, "latency_us": ours_us,
        "call_latency_us": sum(row["call_latency_us"] for row in rows), "pct_peak": total.pct_peak,
        "bound": total.bound,
        "speedup_vs_pytorch": eager_us / ours_us if ours_us > 0 else None,
        "speedup_vs_compile": compile_us / ours_us if compile_us and ours_us > 0 else None,
        "pytorch_latency_us": eager_us, "compile_latency_us": compile_us,
        "peak_vram_mb": peak_mb, "timings": rows, "gpu": gpu.name, "compiled": compiled,
        "launch_floor_us": floor_ms * 1e3 if floor_ms else None,
        "limits": summary.to_json(),
        "speed_of_light": timing.speed_of_light_skipped(gpu) or "checked: no timing faster than the roofline allows",
    }


# --------------------------------------------------------------------------- running and reporting
class Watchdog:
    """Ends the process with a TIMEOUT result when a stage overruns; works even if a GPU kernel hangs."""

    def __init__(self, report, stop_worker):
        self.report, self.stop_worker = report, stop_worker
        self.stage, self.deadline = None, None
        threading.Thread(target=self._watch, daemon=True).start()

    @contextlib.contextmanager
    def limit(self, stage: str, seconds: float):
        self.stage, self.deadline = stage, time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline = None

    def _watch(self):
        while True:
            time.sleep(0.1)
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline:
                self.report(TIMEOUT, self.stage, f"stage '{self.stage}' exceeded its time limit",
                            before_write=self.stop_worker)
                os._exit(EXIT_CODES[TIMEOUT])


class Report:
    """Collects the run's outcome and writes it out once, as rich text, a RESULT line and JSON."""

    def __init__(self, args, nonce: str | None):
        self.args = args
        self.nonce = nonce
        self.started = time.monotonic()
        self.result = {"kernel_type": None, "correctness": None, "failed_stage": None, "message": "",
                       "seed": args.seed, "device": torch.cuda.get_device_name() if ON_GPU else "cpu",
                       "dtype": args.dtype, "timings_meaningful": ON_GPU, "stages": [],
                       "timing_shapes": [registry.format_shape(s) for s in args.shape]}
        self.lock = threading.Lock()
        self.written = False

    def stage_done(self, name: str, cases: int, seconds: float):
        self.result["stages"].append({"stage": name, "cases": cases, "seconds": round(seconds, 3)})

    def finish(self, correctness: str, failed_stage: str | None = None, message: str = "", timing: dict | None = None,
               before_write=None):
        with self.lock:
            if self.written:
                return
            self.written = True
            if before_write is not None:
                before_write()
            # The message quotes the kernel's errors: no secret it read passes on (a person or an agent reads it).
            self.result.update(correctness=correctness, failed_stage=failed_stage, message=redact.scrub(message),
                               wall_seconds=round(time.monotonic() - self.started, 3))
            for key in ("throughput", "throughput_unit", "latency_us", "call_latency_us", "pct_peak", "bound",
                        "speedup_vs_pytorch",
                        "speedup_vs_compile", "pytorch_latency_us", "compile_latency_us", "peak_vram_mb",
                        "speed_of_light", "compiled", "launch_floor_us", "limits"):
                self.result[key] = (timing or {}).get(key)
            self.result["timings"] = (timing or {}).get("timings", [])
            self._write()

    def _write(self):
        r = self.result
        # The nonce (from the runner, never seen by the worker) marks the verdict as this judge's; the digests
        # of the judge's own sources let the runner check that the judge that ran is the run's.
        from autokernel.judge import judge_files
        marks = {"nonce": self.nonce, judge_files.JUDGE_SOURCES: judge_files.compiled()} if self.nonce else {}
        written = json.dumps({**r, **marks}, indent=2)
        if self.args.result_fd is not None:
            # The runner's pipe: only this process holds its write end (the worker was started without it).
            with os.fdopen(self.args.result_fd, "w") as verdict:
                verdict.write(written)
        if self.args.json_out:
            Path(self.args.json_out).write_text(written)
        if self.args.json:
            print(json.dumps(r, indent=2), flush=True)
        else:
            print_summary(r)
        fields = ["kernel_type", "correctness", "throughput", "throughput_unit", "latency_us", "pct_peak",
                  "speedup_vs_pytorch", "peak_vram_mb", "seed"]
        line = " ".join(f"{k}={_fmt(r[k])}" for k in fields)
        stage = f" failed_stage={r['failed_stage'].replace(' ', '_')}" if r["failed_stage"] else ""
        print(f"RESULT {line}{stage} timings_meaningful={r['timings_meaningful']}", flush=True)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_summary(r: dict):
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, highlight=False)
    console.print(f"[bold]bench.py[/bold] {r['kernel_type']} on {r['device']}  seed={r['seed']}  "
                  f"(rerun with --seed {r['seed']} to reproduce)")
    stages = Table(title="correctness", show_edge=False)
    for col in ("stage", "cases", "seconds", "result"):
        stages.add_column(col)
    for s in r["stages"]:
        stages.add_row(s["stage"], str(s["cases"]), f"{s['seconds']:.2f}", "[green]pass[/green]")
    if r["failed_stage"]:
        stages.add_row(r["failed_stage"], "", "", f"[red]{r['correctness']}[/red]")
    console.print(stages)
    if r["message"]:
        # The message may quote the kernel: no markup, and no line breaks of rich's own, so none of its text
        # can turn into markup or start a line that looks like RESULT.
        console.print(f"{r['correctness']} in stage '{r['failed_stage']}': {r['message']}", style="red",
                      markup=False, soft_wrap=True)
    if r["timings"]:
        title = "timing (median, L2 flushed)" if r["timings_meaningful"] else \
            "timing: CPU interpreter, NOT MEANINGFUL (no GPU)"
        table = Table(title=title, show_edge=False)
        for col in ("shape", "latency us", "throughput", "% peak", "pytorch us", "speedup", "compile us"):
            table.add_column(col)
        for t in r["timings"]:
            table.add_row(t["shape"], f"{t['latency_us']:.1f}", f"{t['throughput']:.1f} {t['unit']}",
                          _fmt(t["pct_peak"]),
                          f"{t['pytorch_latency_us']:.1f}", f"{t['pytorch_latency_us'] / t['latency_us']:.2f}x",
                          _fmt(t["compile_latency_us"]))
        console.print(table)
        console.print(f"speed of light: {r['speed_of_light']}")
        for line in limits.describe(r["limits"]):
            console.print(line, markup=False, soft_wrap=True)     # kernel names come from the kernel's process


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", default="kernel.py", help="kernel file to judge (default: kernel.py)")
    parser.add_argument("--shape", action="append", default=[], type=registry.parse_shape,
                        help="a shape to check and time, e.g. M=4096,N=4096 (repeatable; default: the registry's)")
    parser.add_argument("--dtype", default="float16", choices=list(DTYPES), help="dtype to time (default float16)")
    parser.add_argument("--seed", type=int, default=None, help="base seed for the random inputs (default: random)")
    parser.add_argument("--compare-compile", action="store_true", help="also time torch.compile of the reference")
    parser.add_argument("--quick", action="store_true", help="fewer sweep and edge shapes and timed calls")
    parser.add_argument("--screen", action="store_true",
                        help="the loop's first look at a candidate on a GPU: --quick, and the stages check --dtype "
                             "only; a candidate that looks faster is judged again in full before it is kept")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    parser.add_argument("--json-out", help="also write the result as JSON to this file")
    parser.add_argument("--result-fd", type=int, default=None,
                        help="also write the result as JSON to this inherited pipe (how the loop's runner reads it)")
    parser.add_argument("--time-limit-scale", type=float, default=1.0, help="multiply every stage's time limit")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    args.quick = args.quick or args.screen
    return args


def _text_or_empty(path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def judge_kernel(worker: CandidateWorker, args, report: Report, watchdog: Watchdog) -> tuple:
    """Run the stages and the timing; returns (correctness, failed_stage, message, timing)."""
    scale = args.time_limit_scale * INTERPRETER_SLACK
    stage, started = "load", time.monotonic()
    try:
        building = CUDA_BUILD_S if cuda_launches.is_cuda_file(_text_or_empty(args.kernel)) else 0
        with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale + building):
            kt = registry.get(worker.hello())       # only a registry name reaches the report
            report.result["kernel_type"] = kt.name
        report.result["load_seconds"] = round(time.monotonic() - started, 3)
        if not kt.supports(DTYPES[args.dtype]):      # a region is judged in the model's dtype only
            raise CheckFailure(f"{kt.name} is judged in {', '.join(kt.dtypes)} only, not {args.dtype}: "
                               f"pass --dtype {kt.dtypes[0]}")
        judge = Judge(worker, kt, args)
        report.result["timing_shapes"] = [registry.format_shape(s) for s in judge.timing_shapes()]
        for stage, run_stage in STAGES:
            started = time.monotonic()
            with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale):
                cases = run_stage(judge)
            report.stage_done(stage, cases, time.monotonic() - started)
        stage, started = "timing", time.monotonic()
        with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale):
            timing_result = time_kernel(judge)
        report.result["timing_seconds"] = round(time.monotonic() - started, 3)
        return PASS, None, "", timing_result
    except CheckFailure as failure:
        return FAIL, stage, str(failure), None
    except WorkerFailure as failure:
        return failure.kind, stage, str(failure), None
    except KeyError as exc:           # an unknown KERNEL_TYPE
        return CRASH, stage, str(exc).strip("'\""), None
    except Exception as exc:          # the judge's own error: never a PASS, and said as such
        return CRASH, stage, f"the judge failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}", None


def main(argv=None) -> int:
    args = parse_args(argv)
    report = Report(args, worker_process.seal_judge())
    kernel_path = Path(args.kernel)
    if not kernel_path.is_file():
        report.finish(CRASH, "load", f"kernel file not found: {kernel_path}")
        return EXIT_CODES[CRASH]
    refusal = worker_process.refusal_of(kernel_path)      # read from its source: none of it has run
    if refusal:
        report.finish(FAIL, "load", refusal)
        return EXIT_CODES[FAIL]
    worker = CandidateWorker(kernel_path)
    watchdog = Watchdog(report.finish, worker.kill)
    try:
        correctness, stage, message, timing_result = judge_kernel(worker, args, report, watchdog)
    finally:
        worker.close()            # the worker is gone before the verdict is written
    report.finish(correctness, stage, message, timing_result)
    return EXIT_CODES[correctness]


if __name__ == "__main__":
    sys.exit(main())
