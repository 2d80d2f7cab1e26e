"""Where region files live and how a region is read back: by name, checked against its content.

A region file is `<name>.json` (record.Region's JSON) in a regions/ folder: the run's
workspace/regions/ (written by the profiler), an optimized_kernels/regions/ (saved with the kernels
that won, so the folder plugs in on its own), and any folder added with `add_folder`. `load` reads
the file named by a kernel file's KERNEL_TYPE and refuses it unless its definition's digest is the
name: what a region's reference computes is fixed by the name the job gave the kernel, and no file
written later (by a candidate, say) can change it. bench.py reads regions this way (through
autokernel/kernel_types/registry.py) from the work directory's workspace/regions/, which runner.run_bench makes
readable inside the sandbox.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from autokernel.core import paths
from autokernel.kernel_types.base import KernelType
from autokernel.kernel_types.regions.graph import PREFIX
from autokernel.kernel_types.regions.kernel_type import kernel_type as region_kernel_type
from autokernel.kernel_types.regions.record import Region

FOLDER = "regions"
FOLDERS_VARIABLE = "AUTOKERNEL_REGION_DIRS"        # more folders, separated by os.pathsep
_added: list[Path] = []


def is_region(name: str) -> bool:
    return name.startswith(PREFIX)


def add_folder(folder: str | Path) -> None:
    """Read regions from this folder too (plug_in adds its optimized_kernels/regions)."""
    path = Path(folder).resolve()
    if path not in _added:
        _added.append(path)


def folders() -> list[Path]:
    named = [Path(p) for p in os.environ.get(FOLDERS_VARIABLE, "").split(os.pathsep) if p]
    return [paths.WORKSPACE / FOLDER, paths.OPTIMIZED_DIR / FOLDER, *_added, *named]


def save(region: Region, folder: str | Path) -> Path:
    """Write the region's file into folder (atomically); returns its path."""
    target = Path(folder) / f"{region.name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(region.to_json(), indent=1) + "\n")
    os.replace(temporary, target)
    return target


def copy_to(name: str, folder: str | Path) -> None:
    """A region's file into folder/regions/, beside the kernels that name it (nothing for a menu type)."""
    if is_region(name):
        save(load(name), Path(folder) / FOLDER)


def find(name: str) -> Path | None:
    return next((folder / f"{name}.json" for folder in folders() if (folder / f"{name}.json").is_file()), None)


def load(name: str) -> Region:
    """The region a name names; KeyError when no folder has it, ValueError when its file is not that region."""
    return _load(name, find(name))


@lru_cache(maxsize=None)
def _load(name: str, path: Path | None) -> Region:
    if path is None:
        raise KeyError(f"unknown kernel type {name!r}: no region file {name}.json in "
                       f"{', '.join(str(f) for f in folders())}")
    region = Region.from_json(json.loads(path.read_text()))
    if region.name != name:
        raise ValueError(f"{path} holds the region {region.name}, not {name}: it was changed after it was written")
    return region


@lru_cache(maxsize=None)
def _kernel_type(name: str, path: Path) -> KernelType:
    return region_kernel_type(_load(name, path))


def kernel_type(name: str) -> KernelType:
    """The region's kernel type (built once per file)."""
    path = find(name)
    if path is None:
        _load(name, None)
    return _kernel_type(name, path)
