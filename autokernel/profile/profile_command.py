"""Command line for the profiler: where a model's time goes, ranked by Amdahl's law, into workspace/.

    python profile.py MODEL [--class-name NAME] [--input-shape 1,512] [--dtype float16]
                      [--model-arg NAME=VALUE ...] [--device cuda] [--top N] [--out DIR]
    python profile.py --hf llama [--input-shape 1,512] [--dtype float16] ...

Writes workspace/profile_report.json (every op, its time, shapes and kernel type) and
workspace/optimization_plan.json (kernel types ranked by end-to-end impact), then prints the
plan. The work is done by autokernel/profile/profiler.py; extract.py turns the plan into kernel jobs.
profile.py in the layout is this module's door; `autokernel profile` starts it as `python -m
autokernel.profile.profile_command`.
"""

import argparse
import sys
from pathlib import Path

from autokernel.core import paths
from autokernel.profile.model_args import add_model_arguments, load_model_keywords


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=paths.command_name("profile.py"),
        description="Profile a PyTorch model and rank its kernels by Amdahl's law (writes workspace/*.json).")
    add_model_arguments(parser)
    parser.add_argument("--warmup", type=_positive_int, default=3, help="unprofiled forward passes first (default 3)")
    parser.add_argument("--iters", type=_positive_int, default=10, help="profiled forward passes (default 10)")
    parser.add_argument("--top", type=_positive_int, default=None, help="show only the top N kernel types")
    parser.add_argument("--out", help="workspace directory for the JSON files (default: workspace/)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported here, not at the top: torch is slow to import, and --help should not wait for it.
    from autokernel.core import interpreter, paths
    from autokernel.profile import profiler

    interpreter.choose()        # first: no GPU means Triton's interpreter
    from autokernel.profile.models import ModelLoadError, load_model

    try:
        loaded = load_model(**load_model_keywords(args))
    except ModelLoadError as error:
        print(f"{paths.command_name('profile.py')}: {error}", file=sys.stderr)
        return 2
    _, plan = profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=args.out,
                                            warmup=args.warmup, iters=args.iters)
    profiler.print_plan(plan, top=args.top)
    workspace = Path(args.out) if args.out else paths.WORKSPACE
    print(f"wrote {workspace / profiler.PLAN_FILE} and {workspace / profiler.REPORT_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
