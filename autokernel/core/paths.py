"""Where AutoKernel finds things: its own files (the judge, the starters, the playbook) and the run's files.

Two places, found apart:
  - the tool's files: bench.py, profile.py, extract.py, verify.py, program.md and kernels/. In a clone
    they are beside the package (the fixed layout); an installed wheel carries copies of them inside
    the package, in autokernel/_layout/ (setup.py puts them there when it builds the wheel).
  - the run's files: kernel.py, workspace/, optimized_kernels/ and results.tsv, in the work
    directory: the folder named by --workdir (or AUTOKERNEL_WORKDIR), else the git repository the
    command runs in, else (from a clone, outside any repository) the clone, where status and report
    read; `optimize` refuses to start there (outside_any_repository), in either install.
The constants below are read at call time (`paths.WORKSPACE`), so use_workdir() moves them all.
"""

from __future__ import annotations

import os
from pathlib import Path

WORKDIR_VARIABLE = "AUTOKERNEL_WORKDIR"
PACKAGE_DIR = Path(__file__).resolve().parents[1]       # autokernel/, above core/
PACKAGED_LAYOUT = PACKAGE_DIR / "_layout"
MANIFEST_NAME = "manifest.json"
OPTIMIZED_DIR_NAME = "optimized_kernels"     # the kept kernels and their manifest, on the run's branch


def _tool_dir() -> Path:
    clone = PACKAGE_DIR.parent
    if (clone / "bench.py").is_file() and (clone / "kernels").is_dir() and (clone / "pyproject.toml").is_file():
        return clone
    return PACKAGED_LAYOUT


def _enclosing_repository(folder: Path) -> Path | None:
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def find_workdir() -> Path:
    """The folder that holds the run's files (see the module's docstring for the order)."""
    named = os.environ.get(WORKDIR_VARIABLE)
    if named:
        return Path(named).expanduser().resolve()
    here = Path.cwd().resolve()
    return _enclosing_repository(here) or (TOOL_DIR if TOOL_DIR != PACKAGED_LAYOUT else here)


def outside_any_repository() -> str | None:
    """Why `optimize` must not start here, or None: no --workdir was named and the command runs outside any git
    repository, so the work folder is only a fallback (the clone, or the folder itself), not the user's project."""
    if os.environ.get(WORKDIR_VARIABLE) or _enclosing_repository(Path.cwd().resolve()):
        return None
    return (f"{Path.cwd()} is not inside a git repository: run `autokernel optimize` in your project's git "
            f"repository (the run commits there, on a branch of its own), or name one with --workdir DIR")


TOOL_DIR = _tool_dir()
IN_CLONE = TOOL_DIR != PACKAGED_LAYOUT
BENCH_SCRIPT = TOOL_DIR / "bench.py"
STARTERS_DIR = TOOL_DIR / "kernels"
PROGRAM_MD = TOOL_DIR / "program.md"


def script(name: str) -> Path:
    """One of the tool's front-door scripts (bench.py, profile.py, extract.py, verify.py)."""
    return TOOL_DIR / name


# The kernel languages a job may start from: Triton (kernels/<type>.py) or CUDA C++ (kernels/cuda/<type>.py);
# "any" starts from Triton and lets the agent switch (program.md, "CUDA C++ kernels").
BACKENDS = ("triton", "cuda", "any")


def starter_path(kernel_type: str, backend: str = "triton") -> Path:
    return STARTERS_DIR / "cuda" / f"{kernel_type}.py" if backend == "cuda" else STARTERS_DIR / f"{kernel_type}.py"


def use_workdir(folder: str | Path | None = None) -> Path:
    """Point every run file at `folder` (or at find_workdir()); children started later inherit the choice."""
    global ROOT, KERNEL_FILE, WORKSPACE, OPTIMIZED_DIR, MANIFEST_FILE, RESULTS_TSV
    if folder is not None:
        os.environ[WORKDIR_VARIABLE] = str(Path(folder).expanduser().resolve())
    ROOT = find_workdir()
    KERNEL_FILE = ROOT / "kernel.py"
    WORKSPACE = ROOT / "workspace"
    OPTIMIZED_DIR = ROOT / OPTIMIZED_DIR_NAME
    MANIFEST_FILE = OPTIMIZED_DIR / MANIFEST_NAME
    RESULTS_TSV = ROOT / "results.tsv"
    return ROOT


ROOT = KERNEL_FILE = WORKSPACE = OPTIMIZED_DIR = MANIFEST_FILE = RESULTS_TSV = Path()
use_workdir()
