"""End to end: whole models (PyTorch's best against AutoKernel's best), and where a routed forward's time goes.

    python benchmarks/end_to_end.py SUBCOMMAND [options]     (SUBCOMMAND --help: what it measures, its options)

Each subcommand is a module of benchmarks/suites/. `models run OUT` runs verify.py on every model and
`models summarize OUT` makes its table; the others break a model's or one call's time down. A GPU is
needed but for compile-count (counted on the CPU) and router-glue and routing-profile (they run on CPU too).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages
from benchmarks.common import run_subcommand  # noqa: E402

# subcommand -> its module in benchmarks/suites/ (whose docstring's first line is the subcommand's help)
SUBCOMMANDS = {"models": "verify_models", "headroom": "model_headroom", "routing-profile": "routing_profile",
               "launch-overhead": "launch_overhead", "router-glue": "router_glue", "compile-count": "compile_count",
               "zoo": "zoo", "plugged-overhead": "plugged_overhead", "linear-concat": "linear_concat_ab",
               "precompile-threads": "precompile_threads"}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
