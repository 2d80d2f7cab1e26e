"""The fixed judge: check a kernel in five correctness stages, then time it against PyTorch.

    python bench.py [--kernel kernel.py] [--shape M=4096,N=4096 ...] [--dtype float16]
                    [--seed N] [--compare-compile] [--quick | --screen] [--one-dtype] [--json | --json-out FILE]
                    [--result-fd N]
    python -m autokernel.judge.bench ...      # the same process: how the package starts it (judge/runner.py)

bench.py in the layout is this module's door. The agent never edits either. The kernel file never runs in this
process: a worker process (autokernel/judge/candidate/worker.py) imports it and runs kernel_fn when asked, and sends
back only outputs and timings. This process makes its own copy of every input, computes the reference, compares,
and writes the verdict (autokernel/judge/verdict.py). The stages (autokernel/judge/stages.py), in order (the first
failure ends the run):
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

Then timing (autokernel/judge/timing_stage.py), at the --shape shapes or the registry's timing shape: every timed call gets fresh
inputs written into the same tensors, with the L2 flushed; the median of the calls is the latency.
Timed calls are checked calls: the whole output of a random timed call, the last one and one more
after them, and a random sample of the others' (all, or a random share within a time budget), are
compared with the reference. Each timed call's inputs come from a seed the judge draws as it asks
for the call, the judge's own clock runs from that request to the proof of the output and bounds the
worker's times from below, and a time faster than the GPU's roofline allows is a FAIL. PyTorch eager (and optionally torch.compile) are timed the same way, in this process. Each stage has a time limit; a hang is reported as TIMEOUT.
Exit code: 0 PASS, 1 FAIL, 2 CRASH, 3 TIMEOUT.

Without a GPU the same Triton kernels run through Triton's interpreter on CPU at small shapes,
and the timings are labelled as not meaningful.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Keep this block first, whichever door started the process (bench.py runs this module as __main__ too).
    # First, before any candidate runs: every module of the judge is compiled from its source and its digest
    # kept, for the verdict (autokernel/judge/judge_files.py). Then, before anything heavy: seal this process and
    # start the kernel's worker, which imports torch, Triton and the kernel file while this process imports
    # its own (autokernel/judge/candidate/worker_process.py).
    from autokernel.judge import judge_files
    judge_files.record_compiled()
    from autokernel.judge.candidate import worker_process
    worker_process.start_early(sys.argv[1:])

import argparse
import gc
import secrets
import time
from pathlib import Path

from autokernel.core.contracts import CRASH, FAIL, PASS
from autokernel.core.dtypes import DTYPES
from autokernel.core.gpu_lock import gpu_to_itself
from autokernel.judge import cuda_launches
from autokernel.judge.candidate import worker_process
from autokernel.judge.correctness import CheckFailure
from autokernel.judge.judge_link import CandidateWorker, WorkerFailure
from autokernel.judge.stages import ON_GPU, STAGES, Judge
from autokernel.judge.timing_stage import time_kernel
from autokernel.judge.verdict import EXIT_CODES, Report, Watchdog
from autokernel.kernel_types import registry

# Seconds each stage may take before the run is reported as TIMEOUT; the first stage includes
# compilation. The interpreter is two orders of magnitude slower, so it gets more room.
STAGE_LIMITS_S = {"load": 60, "smoke": 60, "shape sweep": 180, "stability": 90, "determinism": 90,
                  "edge shapes": 180, "timing": 240}
INTERPRETER_SLACK = 1 if ON_GPU else 3
# A CUDA C++ kernel file (autokernel/judge/cuda_build.py) compiles while it loads: nvcc and the host compiler
# take about a minute for a new source (none for a cached build), so its load stage gets this much more.
CUDA_BUILD_S = 240


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", default="kernel.py", help="kernel file to judge (default: kernel.py)")
    parser.add_argument("--shape", action="append", default=[], type=registry.parse_shape,
                        help="a shape to check and time, e.g. M=4096,N=4096 (repeatable; default: the registry's)")
    parser.add_argument("--dtype", default="float16", choices=list(DTYPES), help="dtype to time (default float16)")
    parser.add_argument("--seed", type=int, default=None, help="base seed for the random inputs (default: random)")
    parser.add_argument("--compare-compile", action="store_true", help="also time torch.compile of the reference")
    parser.add_argument("--quick", action="store_true", help="fewer sweep and edge shapes and timed calls")
    parser.add_argument("--one-dtype", action="store_true",
                        help="the stages check --dtype only (a job's baseline: its starter, at every shape)")
    parser.add_argument("--screen", action="store_true",
                        help="the loop's first look at a candidate on a GPU: --quick and --one-dtype; a candidate "
                             "that looks faster is judged again in full before it is kept")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    parser.add_argument("--json-out", help="also write the result as JSON to this file")
    parser.add_argument("--result-fd", type=int, default=None,
                        help="also write the result as JSON to this inherited pipe (how the loop's runner reads it)")
    parser.add_argument("--time-limit-scale", type=float, default=1.0, help="multiply every stage's time limit")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    args.quick = args.quick or args.screen
    args.one_dtype = args.one_dtype or args.screen
    return args


def _text_or_empty(path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def announce(stage: str) -> None:
    """`STAGE <name>` on stderr as a stage begins: the loop's live view shows where a judgement is (search/loop.py),
    and a crash's last lines say in which stage it came. stdout stays the report's (--json keeps it pure JSON)."""
    print(f"STAGE {stage}", file=sys.stderr, flush=True)


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
            announce(stage)
            started = time.monotonic()
            with watchdog.limit(stage, STAGE_LIMITS_S[stage] * scale):
                cases = run_stage(judge)
            report.stage_done(stage, cases, time.monotonic() - started)
        stage = "timing"
        announce(stage)
        with gpu_to_itself():      # runs side by side on one GPU time one at a time (a wait here is no stage's time)
            started = time.monotonic()
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
    code = main()
    # The verdict is written and the worker is gone. Python's teardown with torch loaded then spends about half a
    # second of CPU collecting objects that die with the process anyway (issue 37: 0.6 of a 5 s bench on two cores);
    # frozen, they are left to the exit. atexit handlers still run and output is still flushed. Not where Triton was
    # loaded (--compare-compile's Inductor): its bindings print a warning for every object of theirs left at the exit.
    if not any(name == "triton" or name.startswith("triton.") for name in sys.modules):
        gc.freeze()
    sys.exit(code)
