"""Where AutoKernel keeps things: the project checkout, the workspace and the optimized kernels."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL_FILE = ROOT / "kernel.py"
BENCH_SCRIPT = ROOT / "bench.py"
STARTERS_DIR = ROOT / "kernels"
WORKSPACE = ROOT / "workspace"
OPTIMIZED_DIR = ROOT / "optimized_kernels"
MANIFEST_NAME = "manifest.json"
MANIFEST_FILE = OPTIMIZED_DIR / MANIFEST_NAME
RESULTS_TSV = ROOT / "results.tsv"
PROGRAM_MD = ROOT / "program.md"


def starter_path(kernel_type: str) -> Path:
    return STARTERS_DIR / f"{kernel_type}.py"
