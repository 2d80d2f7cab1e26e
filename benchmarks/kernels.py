"""Per-kernel comparisons: the starters against PyTorch eager, torch.compile, Liger-Kernel, cuBLAS and the copy limit.

    python benchmarks/kernels.py SUBCOMMAND [options]        (python benchmarks/kernels.py SUBCOMMAND --help)

Each subcommand is a module of benchmarks/suites/ (its docstring says what it measures and against what).
Timing is triton.testing.do_bench's median with the L2 cache flushed (benchmarks/common.py); every result
names the device, date, torch and Triton versions. All need a GPU but those marked "CPU: --dry-run".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages

from benchmarks.common import Subcommand, run_subcommand  # noqa: E402

SUBCOMMANDS = {
    "compare": Subcommand("compare",
                          "every starter vs eager, torch.compile, Liger and the hardware limit (copy, cuBLAS)"),
    "bench-all": Subcommand("bench_all",
                            "the judge (bench.py) on every starter: correctness, latency, speedups, wall time"),
    "gemm-sweep": Subcommand("gemm_sweep",
                             "the GEMM engine vs cuBLAS at every model GEMM; writes the plan table (CPU: --dry-run)"),
    "model-gemms": Subcommand("model_gemms", "print every distinct GEMM of the five benchmark models (CPU)"),
    "tunable-sweep": Subcommand("tunable_sweep",
                                "a starter's tunables at given shapes vs its defaults, eager and torch.compile"),
    "tunables-plan": Subcommand("tunables_plan",
                                "variants of starters from a JSON plan vs the copy limit (docs/notes/)"),
    "model-shapes": Subcommand("model_shapes",
                               "matmul and flash attention at model and KernelBench shapes vs PyTorch (docs/notes/)"),
    "fp32-probe": Subcommand("fp32_probe",
                             "probe: float32 GEMMs in Triton (tf32x3, IEEE) vs cuBLAS SGEMM (docs/notes/)"),
    "fused-check": Subcommand("fused_check",
                              "fused GEMM starters vs eager and torch.compile at the LLaMA shapes (CPU: --dry-run)"),
    "fusion-check": Subcommand("fusion_check", "rmsnorm_linear vs eager and torch.compile: does folding RMSNorm pay"),
    "fusion-check-mlp": Subcommand("fusion_check_mlp",
                                   "rmsnorm_mlp vs eager, torch.compile and the unfused starters (CPU: interpreter)"),
    "coverage-check": Subcommand("coverage_check",
                                 "issue 11.4's problem files: starter vs eager, torch.compile and plug_in"),
    "region-check": Subcommand("region_check",
                               "regions' Inductor-made starters judged against torch.compile (CPU: --dry-run)"),
}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
