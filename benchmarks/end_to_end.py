"""End to end: whole models, and where a routed forward's time goes.

    python benchmarks/end_to_end.py SUBCOMMAND [options]     (python benchmarks/end_to_end.py SUBCOMMAND --help)

Each subcommand is a module of benchmarks/suites/. `models` runs verify.py on every model (PyTorch's best
against AutoKernel's best); the others break a model's or a call's time down. Needs a GPU but where said.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages

from benchmarks.common import Subcommand, run_subcommand  # noqa: E402

SUBCOMMANDS = {
    "models": Subcommand("verify_models",
                         "every model in every mode, PyTorch's best vs AutoKernel's (run OUT / summarize OUT)"),
    "headroom": Subcommand("model_headroom",
                           "how much faster than torch.compile a model can get: the GEMM / attention / rest split"),
    "routing-profile": Subcommand("routing_profile",
                                  "where an eager routed forward spends its time (router, glue, launches)"),
    "launch-overhead": Subcommand("launch_overhead",
                                  "host time of a kernel_fn call in the judge's worker, plain and under each guard"),
    "router-glue": Subcommand("router_glue", "what the router itself costs per routed call (CPU too)"),
    "compile-count": Subcommand("compile_count",
                                "how many Triton kernels one full judge run compiles, counted on the CPU"),
}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
