"""Plugs the optimized kernels into the model and proves the end-to-end result: the same output, and which path is faster.

    python verify.py [MODEL] [--class-name NAME] [--input-shape 1,512] [--dtype float16]
                     [--model-arg NAME=VALUE ...] [--device cuda]
                     [--optimized-dir optimized_kernels | --starters [--top 8]]
                     [--workspace workspace] [--no-compile] [--compile-backend inductor]
                     [--route measured|all] [--overhead] [--time-limit SECONDS]
    python verify.py models/llama.py --dtype float16 --model-arg batch=4 --model-arg seq=1024
    python verify.py --hf llama [--input-shape 1,512] [--dtype float16] ...
    python verify.py                 # the model the run in workspace/state.json optimized, with its arguments

The model is loaded as profile.py loads it (same seed: same weights and inputs). With no model named, it is
the model the run saved in the workspace optimized, with the arguments it was given
(autokernel/verify/run_model.py). In one process, on those inputs, it is run and timed six ways: PyTorch eager, torch.compile, torch.compile with
CUDA graphs (mode="reduce-overhead"), and each of the three with our kernels plugged in
(autokernel/verify/endtoend.py). Between the two halves:
  - every kernel is plugged in wherever it was verified, and the model's output must match the
    original's: the correctness check;
  - at every call signature the model makes, our kernel is timed against what PyTorch runs there,
    eagerly and compiled; only the signatures where ours is faster by more than the noise are routed
    in the AutoKernel variants ("--route all" routes every verified call instead). This route table
    is printed, written to the report, and, on a GPU, into the kernels' manifest, which
    autokernel.plug_in follows from then on.
The verdict names PyTorch's best and AutoKernel's best and says which to use: "faster by X", or
"no gain: use <PyTorch's best>". --overhead also sets the all-routed model's latency against the
sum of its parts (autokernel/verify/overhead.py). --starters verifies the starters (kernels/<type>.py, or
Inductor's code for a region) of the plan's top 8 kernel types (--top; profiled first when there is no plan), at
the plan's shapes.

The error check: for every tensor of the output, max |ours - original| / max |original| must be at
most the output dtype's tolerance (float16 1e-2, bfloat16 2e-2, float32 1e-4; float32 under TF32 float16's,
and never under 4x the error PyTorch's own path makes with cuDNN's TF32 convolutions), for the checked
all-routed model and for every AutoKernel variant that ran. On the CPU (Triton's interpreter)
timings are wall-clock and NOT MEANINGFUL, and nothing is routed by measurement.
The report is printed and written to workspace/verify_report.json.

The kernels are code an LLM wrote, so all of this runs in a sandboxed child process
(autokernel/verify/isolated.py): no API key in its environment, no home folder, no network, writes only to
a folder of its own. This process starts it, shows its output, and records what it hands back: the
route tables into the kernels' manifest, the plan and the report into the workspace. The logic is
autokernel/verify/verification.py. verify.py in the layout is this module's door; `autokernel verify` and the
sandboxed child start it as `python -m autokernel.verify.verify_command`.
Exit code: 0 the error check passes, 1 it fails, 2 verify could not run (bad model, no kernels), 3 no kernel
type covers the model (PyTorch's paths are still compared), 4 nothing was checked: no kernel took any call of the
model (every call fell back, say at shapes the kernels were not verified for), and the report says which and why,
5 the error check passes with parts dropped for failures (the report's "dropped" names each and why;
autokernel/verify/containment.py). A verdict of "no gain" is not a failure: the exit code is about correctness.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autokernel.core import interpreter, paths
from autokernel.profile import models
from autokernel.profile.model_args import add_model_arguments, load_model_keywords, names_a_model
from autokernel.routing.decisions import MEASURED, POLICIES
from autokernel.routing.manifest import PlugInError
from autokernel.verify import deadline, isolated, run_model
from autokernel.verify.verification import (EXIT_ERROR, EXIT_NOTHING_TO_PLUG_IN, STARTERS_TOP, NothingToPlugIn, Outcome,
                                            run)
from autokernel.verify.child_lines import OWN_ERROR, OwnLines
from autokernel.verify.verify_report import print_report, report_console


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=paths.command_name("verify.py"),
                                     description="Plug the optimized kernels into a model, check its output "
                                                 "and compare it end to end with PyTorch's own paths.")
    add_model_arguments(parser)
    kernels = parser.add_mutually_exclusive_group()
    kernels.add_argument("--optimized-dir", default=str(paths.OPTIMIZED_DIR),
                         help="the folder with manifest.json and the kernels (default optimized_kernels/)")
    kernels.add_argument("--starters", action="store_true",
                         help="verify the starter kernels of each kernel type in the model's plan, at its shapes "
                              "and dtype (profiling the model first when the workspace has no plan of it)")
    parser.add_argument("--top", type=int, default=STARTERS_TOP,
                        help=f"with --starters, the starters of the plan's TOP kernel types with the most time, as "
                             f"optimize --top picks its jobs (default {STARTERS_TOP}; 0: every kernel type)")
    parser.add_argument("--route", choices=POLICIES, default=MEASURED,
                        help="measured (default): route a call only where our kernel was measured faster there; "
                             "all: route every call the kernels were verified for")
    parser.add_argument("--overhead", action="store_true",
                        help="also time the all-routed model against the sum of its parts (routing overhead)")
    parser.add_argument("--workspace", default=str(paths.WORKSPACE),
                        help="where the plan is read (or written by --starters) and verify_report.json written "
                             "(default workspace/)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants (slow on CPU)")
    parser.add_argument("--max-autotune", action="store_true",
                        help='also time torch.compile(mode="max-autotune") (a GPU, minutes of autotuning): shown beside '
                             "PyTorch's best, never chosen by the verdict")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend (default inductor; the CUDA-graph variants need inductor)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="end with a verdict within about this many seconds: the end-to-end checks of routes "
                             "that would not fit are left out, and those routes dropped (the report says which)")
    # The sandboxed child's own (autokernel/verify/isolated.py): where it writes, the pipe it answers on, and
    # whether it compares PyTorch's own paths alone (after a first child crashed with our kernels in it).
    parser.add_argument("--pytorch-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--write-to", help=argparse.SUPPRESS)
    parser.add_argument("--sandboxed-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)   # --time-limit from the parent's start
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.sandboxed_fd is None:
        if not names_a_model(args):
            try:
                flags, line = run_model.recorded_flags(Path(args.workspace))
            except run_model.NoRunModel as error:
                print(f"{paths.command_name('verify.py')}: {error}", file=sys.stderr)
                return EXIT_ERROR
            print(line, flush=True)
            argv = flags + argv
            args = build_parser().parse_args(argv)
        elif args.model is None and args.hf is None:
            print(f"{paths.command_name('verify.py')}: name the model these flags are for (a model file, or --hf "
                  "NAME), or give none of them to verify the model the run optimized", file=sys.stderr)
            return EXIT_ERROR
        if args.time_limit is not None:
            argv += ["--deadline", repr(deadline.now() + args.time_limit)]
        return isolated.verify_in_sandbox(argv, model=args.model, workspace=Path(args.workspace),
                                          optimized_dir=Path(args.optimized_dir), starters=args.starters)
    return _in_sandbox(args)


def _in_sandbox(args) -> int:
    """The child's side: verify, print the report, and answer on the pipe (autokernel/verify/isolated.py)."""
    interpreter.choose()        # first, before any kernel file is imported: no GPU means Triton's interpreter
    deadline.start(args.deadline)
    # Our own lines are marked, so that the parent shows them and sends torch's to the workspace's log.
    errors = OwnLines(sys.stderr, OWN_ERROR)
    console = report_console(OwnLines(sys.stdout))   # the terminal's width (the parent passes it), or whole tables
    if hidden := isolated.gpu_hidden():
        print(f"{paths.command_name('verify.py')}: {hidden}", file=errors, flush=True)
        with open(args.sandboxed_fd, "w") as answer:
            json.dump(Outcome(EXIT_ERROR).to_json(), answer)
        return EXIT_ERROR
    try:
        loaded = models.load_model(**load_model_keywords(args))
        outcome = run(loaded, workspace=Path(args.workspace), out=Path(args.write_to),
                      optimized_dir=None if args.pytorch_only else Path(args.optimized_dir),
                      starters=args.starters and not args.pytorch_only,
                      compile_backend=None if args.no_compile else args.compile_backend, policy=args.route,
                      overhead=args.overhead, console=console, max_autotune=args.max_autotune, top=args.top)
    except (models.ModelLoadError, PlugInError) as error:
        print(f"{paths.command_name('verify.py')}: {error}", file=errors, flush=True)
        outcome = Outcome(EXIT_NOTHING_TO_PLUG_IN if isinstance(error, NothingToPlugIn) else EXIT_ERROR)
    else:
        print_report(outcome.report, console)
    with open(args.sandboxed_fd, "w") as answer:
        json.dump(outcome.to_json(), answer)
    return outcome.exit_code


if __name__ == "__main__":
    code = main()
    if any(arg.startswith("--sandboxed-fd") for arg in sys.argv[1:]):     # the sandboxed child, which has answered
        from autokernel.core import teardown

        teardown.answered_exit(code)
    sys.exit(code)
