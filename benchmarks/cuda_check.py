"""The CUDA C++ backend: builds, the judge on its starters and attacks, compile reports, speed against cuBLAS and copy.

    python benchmarks/cuda_check.py SUBCOMMAND [options]     (SUBCOMMAND --help: what it measures, its options)

Each subcommand is a module of benchmarks/suites/. compile and engine-compile run without a GPU (NVRTC and
ptxas, Triton's compiler for sm_90); backend, gemm and sweep need a GPU and nvcc.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages
from benchmarks.common import run_subcommand  # noqa: E402

# subcommand -> its module in benchmarks/suites/ (whose docstring's first line is the subcommand's help)
SUBCOMMANDS = {"backend": "cuda_backend", "compile": "cuda_compile_check", "gemm": "cuda_gemm_check",
               "sweep": "cuda_sweep", "engine-compile": "engine_compile_check"}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
