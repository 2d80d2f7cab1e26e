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


# The kernel languages a job may start from: Triton (kernels/<type>.py) or CUDA C++ (kernels/cuda/<type>.py);
# "any" starts from Triton and lets the agent switch (program.md, "CUDA C++ kernels").
BACKENDS = ("triton", "cuda", "any")


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    return STARTERS_DIR / "cuda" / f"{kernel_type}.py" if backend == "cuda" else STARTERS_DIR / f"{kernel_type}.py"
