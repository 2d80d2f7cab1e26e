"""The CUDA C++ backend: builds, the judge on its starters and attacks, compile reports, speed against cuBLAS and copy.

    python benchmarks/cuda_check.py SUBCOMMAND [options]     (python benchmarks/cuda_check.py SUBCOMMAND --help)

Each subcommand is a module of benchmarks/suites/. `compile` and `engine-compile` run without a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages

from benchmarks.common import Subcommand, run_subcommand  # noqa: E402

SUBCOMMANDS = {
    "backend": Subcommand("cuda_backend",
                          "build, judge, anti-cheat and speed of the CUDA starters (Triton, eager, copy, cuBLAS)"),
    "compile": Subcommand("cuda_compile_check",
                          "a CUDA starter through NVRTC and ptxas for sm_90a: registers, spills (CPU)"),
    "gemm": Subcommand("cuda_gemm_check",
                       "the CUDA GEMM starter's edge shapes and speed vs the Triton starter and cuBLAS"),
    "sweep": Subcommand("cuda_sweep", "a CUDA starter's tunables vs copy bandwidth, each variant its own build"),
    "engine-compile": Subcommand("engine_compile_check",
                                 "every plan of the Triton GEMM engine compiled for sm_90 (CPU)"),
}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
