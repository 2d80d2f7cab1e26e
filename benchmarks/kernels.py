"""Per-kernel comparisons: starters against PyTorch eager, torch.compile, Liger-Kernel, cuBLAS and the copy limit.

    python benchmarks/kernels.py SUBCOMMAND [options]        (SUBCOMMAND --help: what it measures, its options)

Each subcommand is a module of benchmarks/suites/; timing is triton.testing.do_bench's median with the L2
cache flushed (benchmarks/common.py), and every result names the device, date, torch and Triton versions.
A GPU is needed but for: model-gemms; gemm-sweep, fused-check and region-check with --dry-run and
fusion-check-mlp without a GPU (Triton's interpreter: the script's path is checked, timings mean nothing).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages
from benchmarks.common import run_subcommand  # noqa: E402

# subcommand -> its module in benchmarks/suites/ (whose docstring's first line is the subcommand's help)
SUBCOMMANDS = {"compare": "compare", "bench-all": "bench_all", "gemm-sweep": "gemm_sweep",
               "model-gemms": "model_gemms", "tunable-sweep": "tunable_sweep", "tunables-plan": "tunables_plan",
               "model-shapes": "model_shapes", "fp32-probe": "fp32_probe", "fused-check": "fused_check",
               "fusion-check": "fusion_check", "fusion-check-mlp": "fusion_check_mlp",
               "coverage-check": "coverage_check", "region-check": "region_check", "head-probe": "head_probe"}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
