"""The fixed judge: check a kernel in five correctness stages, then time it against PyTorch.

    python bench.py [--kernel kernel.py] [--shape M=4096,N=4096 ...] [--dtype float16]
                    [--seed N] [--compare-compile] [--quick] [--json | --json-out FILE]

The agent never edits this file. The stages, in order (the first failure ends the run):
  1. smoke          one small input, twice with fresh values (a cached result fails the second);
  2. shape sweep    the registry's shapes (and any --shape) in float16, bfloat16 and float32;
  3. stability      adversarial inputs: huge logits, near-zero variance, high dynamic range...;
  4. determinism    the same input three times must give bitwise identical outputs;
  5. edge shapes    non-powers of two (1023, 4097, 1537) and size 1.
Every checked call runs with poisoned allocations, unchanged-input and own-launch checks
(autokernel/correctness.py). Inputs are fresh random values each run; the seed is printed.
Then the kernel, PyTorch eager and optionally torch.compile are timed (median, L2 flushed) at
the --shape shapes, or the registry's timing shape. Each stage has a time limit; a hang is
reported as TIMEOUT. Exit code: 0 PASS, 1 FAIL, 2 CRASH, 3 TIMEOUT.

Without a GPU the same Triton kernels run through Triton's interpreter on CPU at small shapes,
and the timings are labelled as not meaningful.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import secrets
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Must be set before the kernel module is imported: triton.jit reads it when decorating.
    os.environ["TRITON_INTERPRET"] = "1"

from autokernel import hardware, registry  # noqa: E402
from autokernel.correctness import CheckFailure, LaunchCounter, check_case, same_bits  # noqa: E402
from autokernel.timing import median_latency_ms, roofline  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
EXIT_CODES = {"PASS": 0, "FAIL": 1, "CRASH": 2, "TIMEOUT": 3}
# Seconds each stage may take before the run is reported as TIMEOUT; the first stage includes
# compilation. The interpreter is two orders of magnitude slower, so it gets more room.
STAGE_LIMITS_S = {"smoke": 60, "shape sweep": 180, "stability": 90, "determinism": 90, "edge shapes": 180,
                  "timing": 240}
INTERPRETER_SLACK = 1 if ON_GPU else 3


class Judge:
    """Everything one bench run needs: the kernel, its registry entry, the device and the seeds."""

    def __init__(self, kernel_fn, kt: registry.KernelType, args):
        self.kernel_fn = kernel_fn
        self.kt = kt
        self.args = args
        self.device = "cuda" if ON_GPU else "cpu"
        self.dtype = DTYPES[args.dtype]
        self.seed = args.seed
        self.case_index = 0
        self.counter = LaunchCounter().install()

    def next_seed(self) -> int:
        self.case_index += 1
        return self.seed + self.case_index

    def inputs(self, shape, dtype, maker=None) -> dict:
        seed = self.next_seed()
        if maker is None:
            return self.kt.inputs(shape, dtype, seed, self.device)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        return maker(shape, dtype, gen, self.device)

    def check(self, shape, dtype, maker=None, label="") -> torch.Tensor:
        inputs = self.inputs(shape, dtype, maker)
        try:
            return check_case(self.kt, self.kernel_fn, inputs, dtype, self.counter)
        except CheckFailure as failure:
            where = f"{label + ' ' if label else ''}{registry.format_shape(shape)} {dtype_name(dtype)}"
            raise CheckFailure(f"{where}: {failure}") from None

    def sweep_shapes(self) -> list[dict]:
        shapes = self.kt.sweep if ON_GPU else self.kt.cpu_sweep
        return [shapes[0], shapes[len(shapes) // 2], shapes[-1]] if self.args.quick else list(shapes)

    def edge_shapes(self) -> list[dict]:
        shapes = self.kt.edge_shapes if ON_GPU else self.kt.cpu_edge_shapes
        return shapes[:2] + shapes[-1:] if self.args.quick else list(shapes)

    def timing_shapes(self) -> list[dict]:
        if self.args.shape:
            return self.args.shape
        return [self.kt.timing_shape if ON_GPU else self.kt.cpu_sweep[-1]]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --------------------------------------------------------------------------- the five stages
def stage_smoke(judge: Judge) -> int:
    shape = judge.kt.smoke_shape
    first = judge.check(shape, judge.dtype)
    second = judge.check(shape, judge.dtype, label="second call with fresh inputs:")
    if first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr() and first.numel():
        raise CheckFailure("kernel_fn returned the same output buffer on two calls; "
                           "each call must return a fresh tensor")
    return 2


def stage_shape_sweep(judge: Judge) -> int:
    cases = 0
    for dtype in DTYPES.values():
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
        for dtype in DTYPES.values():
            judge.check(shape, dtype, adversarial.make_inputs, label=f"[{adversarial.name}: {adversarial.why}]")
            cases += 1
    return cases


def stage_determinism(judge: Judge) -> int:
    shape = judge.timing_shapes()[0]
    inputs = judge.inputs(shape, judge.dtype)
    outputs = [judge.kernel_fn(**inputs) for _ in range(3)]
    for i, output in enumerate(outputs[1:], start=2):
        if not same_bits(outputs[0], output):
            diff = (outputs[0].double() - output.double()).abs()
            raise CheckFailure(f"{registry.format_shape(shape)} {judge.args.dtype}: call {i} differs from call 1 "
                               f"on the same input ({int((diff != 0).sum())} elements, max difference "
                               f"{float(diff.max()):.3g}); look for atomics or a race")
    return 3


def stage_edge_shapes(judge: Judge) -> int:
    cases = 0
    for dtype in DTYPES.values():
        for shape in judge.edge_shapes():
            judge.check(shape, dtype)
            cases += 1
    return cases


STAGES = [("smoke", stage_smoke), ("shape sweep", stage_shape_sweep), ("stability", stage_stability),
          ("determinism", stage_determinism), ("edge shapes", stage_edge_shapes)]


# --------------------------------------------------------------------------- timing
def time_kernel(judge: Judge) -> dict:
    kt, gpu = judge.kt, hardware.detect()
    rows, kernel_ms, ref_ms, compile_ms = [], 0.0, 0.0, 0.0
    compiled_ref = torch.compile(kt.reference) if judge.args.compare_compile else None
    peak_vram_mb = None
    for shape in judge.timing_shapes():
        inputs = judge.inputs(shape, judge.dtype)
        if ON_GPU:
            judge.kernel_fn(**inputs)                      # compile outside the measurement
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            judge.kernel_fn(**inputs)
            torch.cuda.synchronize()
            peak_vram_mb = max(peak_vram_mb or 0.0, torch.cuda.max_memory_allocated() / 2**20)
        k = median_latency_ms(lambda: judge.kernel_fn(**inputs), ON_GPU, quick=judge.args.quick)
        r = median_latency_ms(lambda: kt.reference(**inputs), ON_GPU, quick=judge.args.quick)
        c = median_latency_ms(lambda: compiled_ref(**inputs), ON_GPU, quick=judge.args.quick) if compiled_ref else None
        line = roofline(kt, [shape], judge.dtype, k, gpu)
        rows.append({"shape": registry.format_shape(shape), "latency_us": k * 1e3, "pytorch_latency_us": r * 1e3,
                     "compile_latency_us": c * 1e3 if c else None, "throughput": line.throughput, "unit": line.unit,
                     "pct_peak": line.pct_peak})
        kernel_ms, ref_ms, compile_ms = kernel_ms + k, ref_ms + r, compile_ms + (c or 0.0)
    total = roofline(kt, judge.timing_shapes(), judge.dtype, kernel_ms, gpu)
    return {
        "throughput": total.throughput, "throughput_unit": total.unit, "latency_us": kernel_ms * 1e3,
        "pct_peak": total.pct_peak, "bound": total.bound,
        "speedup_vs_pytorch": ref_ms / kernel_ms if kernel_ms > 0 else None,
        "speedup_vs_compile": compile_ms / kernel_ms if compiled_ref and kernel_ms > 0 else None,
        "pytorch_latency_us": ref_ms * 1e3, "compile_latency_us": compile_ms * 1e3 if compiled_ref else None,
        "peak_vram_mb": peak_vram_mb, "timings": rows, "gpu": gpu.name,
    }


# --------------------------------------------------------------------------- running and reporting
class Watchdog:
    """Ends the process with a TIMEOUT result when a stage overruns; works even if a GPU kernel hangs."""

    def __init__(self, report):
        self.report = report
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
                self.report("TIMEOUT", self.stage, f"stage '{self.stage}' exceeded its time limit")
                os._exit(EXIT_CODES["TIMEOUT"])


def load_kernel(path: Path):
    spec = importlib.util.spec_from_file_location(f"autokernel_candidate_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel_type = getattr(module, "KERNEL_TYPE", None)
    if kernel_type is None:
        raise ValueError(f"{path} defines no KERNEL_TYPE (one of: {', '.join(registry.REGISTRY)})")
    if not callable(getattr(module, "kernel_fn", None)):
        raise ValueError(f"{path} defines no kernel_fn")
    return module, registry.get(kernel_type)


def crash_message(exc: BaseException, kernel_path: Path) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == kernel_path.name]
    where = f" (at {kernel_path.name}:{frames[-1].lineno}: {frames[-1].line})" if frames else ""
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}{where}"


class Report:
    """Collects the run's outcome and writes it out once, as rich text, a RESULT line and JSON."""

    def __init__(self, args, kernel_type: str | None):
        self.args = args
        self.started = time.monotonic()
        self.result = {"kernel_type": kernel_type, "correctness": None, "failed_stage": None, "message": "",
                       "seed": args.seed, "device": torch.cuda.get_device_name() if ON_GPU else "cpu",
                       "dtype": args.dtype, "timings_meaningful": ON_GPU, "stages": [],
                       "timing_shapes": [registry.format_shape(s) for s in args.shape]}
        self.lock = threading.Lock()
        self.written = False

    def stage_done(self, name: str, cases: int, seconds: float):
        self.result["stages"].append({"stage": name, "cases": cases, "seconds": round(seconds, 3)})

    def finish(self, correctness: str, failed_stage: str | None = None, message: str = "", timing: dict | None = None):
        with self.lock:
            if self.written:
                return
            self.written = True
            self.result.update(correctness=correctness, failed_stage=failed_stage, message=message,
                               wall_seconds=round(time.monotonic() - self.started, 3))
            for key in ("throughput", "throughput_unit", "latency_us", "pct_peak", "bound", "speedup_vs_pytorch",
                        "speedup_vs_compile", "pytorch_latency_us", "compile_latency_us", "peak_vram_mb"):
                self.result[key] = (timing or {}).get(key)
            self.result["timings"] = (timing or {}).get("timings", [])
            self._write()

    def _write(self):
        r = self.result
        if self.args.json_out:
            Path(self.args.json_out).write_text(json.dumps(r, indent=2))
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
        console.print(f"[red]{r['correctness']}[/red] in stage '{r['failed_stage']}': {r['message']}")
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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", default="kernel.py", help="kernel file to judge (default: kernel.py)")
    parser.add_argument("--shape", action="append", default=[], type=registry.parse_shape,
                        help="a shape to check and time, e.g. M=4096,N=4096 (repeatable; default: the registry's)")
    parser.add_argument("--dtype", default="float16", choices=list(DTYPES), help="dtype to time (default float16)")
    parser.add_argument("--seed", type=int, default=None, help="base seed for the random inputs (default: random)")
    parser.add_argument("--compare-compile", action="store_true", help="also time torch.compile of the reference")
    parser.add_argument("--quick", action="store_true", help="fewer sweep and edge shapes (for loop runs on CPU)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    parser.add_argument("--json-out", help="also write the result as JSON to this file")
    parser.add_argument("--time-limit-scale", type=float, default=1.0, help="multiply every stage's time limit")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    kernel_path = Path(args.kernel)
    report = Report(args, kernel_type=None)
    if not kernel_path.is_file():
        report.finish("CRASH", "load", f"kernel file not found: {kernel_path}")
        return EXIT_CODES["CRASH"]
    watchdog = Watchdog(report.finish)
    scale = args.time_limit_scale * INTERPRETER_SLACK
    try:
        with watchdog.limit("load", 60 * scale):
            module, kt = load_kernel(kernel_path)
    except Exception as exc:  # a kernel file that does not even import is the candidate's crash
        report.finish("CRASH", "load", crash_message(exc, kernel_path))
        return EXIT_CODES["CRASH"]
    report.result["kernel_type"] = kt.name
    judge = Judge(module.kernel_fn, kt, args)
    report.result["timing_shapes"] = [registry.format_shape(s) for s in judge.timing_shapes()]
    stage = "load"
    try:
        for stage, run_stage in STAGES:
            started = time.monotonic()
            with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale):
                cases = run_stage(judge)
            report.stage_done(stage, cases, time.monotonic() - started)
        stage = "timing"
        with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale):
            timing = time_kernel(judge)
    except CheckFailure as failure:
        report.finish("FAIL", stage, str(failure))
        return EXIT_CODES["FAIL"]
    except Exception as exc:
        report.finish("CRASH", stage, crash_message(exc, kernel_path))
        return EXIT_CODES["CRASH"]
    report.finish("PASS", timing=timing)
    return EXIT_CODES["PASS"]


if __name__ == "__main__":
    sys.exit(main())
