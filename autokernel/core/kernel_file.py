"""The one way a kernel file (kernel.py, a starter, an optimized kernel) becomes a module: imported from its
path under a name the caller picks, never through sys.path, so no file shadows another.

The worker (autokernel/judge/candidate/worker.py) imports the candidate this way for the judge, the plug-in
(autokernel/routing/kernel_ops.py) the optimized kernels, the built-in agent a starter's planner, and the
kernel tests the starters. Importing runs the file's code: only the worker does it for candidates.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def import_file(path: str | Path, module_name: str) -> ModuleType:
    """Run the file at path as a new module named module_name (not added to sys.modules)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
