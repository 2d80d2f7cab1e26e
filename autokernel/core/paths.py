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
import sys
from pathlib import Path
from typing import Mapping

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
BENCH_SCRIPT = TOOL_DIR / "bench.py"      # the judge's door: a person runs it; the judge's digest covers it
STARTERS_DIR = TOOL_DIR / "kernels"
PROGRAM_MD = TOOL_DIR / "program.md"


# ---------------------------------------------------------------------- the package's own processes
# Python 3.11's -P: the child's working folder (the user's project, where a candidate with the file rules off could
# plant `json.py` or `autokernel/`) is not put first on its import path. Python 3.10 has no such flag; there the
# working folder comes first, as for any `python -m`.
SAFE_PATH_FLAGS = ["-P"] if sys.version_info >= (3, 11) else []


def module_command(module: str, *args: str) -> list[str]:
    """The command line of a process of the package's own: `python -m autokernel.<module> ARGS`.

    Every process the package starts is one of these (or inline code, `python -c`); none runs a file of the layout
    by its path, so the layers' order covers processes as it covers imports (tests/test_architecture_processes.py). Its
    environment needs package_first's PYTHONPATH (runner.run_child gives it to every sandboxed child)."""
    if not module.startswith(f"{PACKAGE_DIR.name}."):
        raise ValueError(f"{module!r} is not a module of the {PACKAGE_DIR.name} package")
    return [sys.executable, *SAFE_PATH_FLAGS, "-m", module, *args]


def package_first(python_path: str | None) -> str | None:
    """PYTHONPATH for a child that runs one of the package's modules: the folder that holds this very package first,
    so the child runs the code this process runs (a clone beside another install, a test's copy of the project).
    An installed package's folder is the interpreter's own site folder: the child finds it there without an entry,
    and none is added (it would come before the standard library)."""
    folder = str(PACKAGE_DIR.parent)
    if folder in _site_folders():
        return python_path
    others = [entry for entry in (python_path or "").split(os.pathsep) if entry and entry != folder]
    return os.pathsep.join([folder, *others])


# What the user typed to start one of the doors' commands ("autokernel verify"), set by the CLI for the process it
# starts: the command's messages and usage lines go by that name, not by the door's file name ("verify.py").
COMMAND_VARIABLE = "AUTOKERNEL_COMMAND"


def command_name(door: str) -> str:
    """The name a door's command goes by in its messages: what the user typed, or the door itself (verify.py)."""
    return os.environ.get(COMMAND_VARIABLE) or door


def module_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """env (this process's, by default) as a child started by module_command needs it: PYTHONPATH package_first."""
    env = dict(os.environ if env is None else env)
    python_path = package_first(env.pop("PYTHONPATH", None))
    return {**env, "PYTHONPATH": python_path} if python_path else env


def _site_folders() -> set[str]:
    import site
    import sysconfig

    found = {sysconfig.get_paths()[name] for name in ("purelib", "platlib")}
    found.update(getattr(site, "getsitepackages", lambda: [])())
    found.add(site.getusersitepackages())
    return {os.path.realpath(folder) for folder in found}


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
