"""What a sandboxed child inherits: an allow-listed environment without secrets, and compiler caches of its own.

runner.run_child gives every child `child_environment()` and private caches (`caches_in` its own
folder); runner.run_bench gives the candidate's worker the caches of its kernel source
(`caches_for`). The loop itself runs with the secrets taken out of its environment
(`secrets_withheld`), once the agent holds its key.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import stat
from pathlib import Path
from typing import Mapping

# The compiler-cache variables and their folder's names (caches_in makes them for the judge).
CACHE_FOLDERS = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "CUDA_CACHE_PATH": "nv",
                 # CUDA C++ kernel files' builds (autokernel/judge/cuda_build.py), compiled inside the sandbox.
                 "AUTOKERNEL_CUDA_CACHE": "cuda"}

# What a child may see of the environment: what Python, the compilers and the GPU stack read.
ALLOWED_ENV = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONHASHSEED",
               "PYTHONUNBUFFERED", "PYTHONIOENCODING", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
               "LD_LIBRARY_PATH", "CC", "CXX", "XDG_CACHE_HOME"}
ALLOWED_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "CUBLAS_",
                        "CUDNN_", "HIP_", "ROCM_", "HSA_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "AUTOKERNEL_")
# Never passed on, even when the allow-list would: anything that looks like a credential.
SECRET_PATTERNS = ("ANTHROPIC_*", "OPENAI_*", "*_API_KEY", "*_TOKEN", "*SECRET*", "*PASSWORD*", "*CREDENTIAL*",
                   "*_KEY", "*PAT", "*AUTH*")

def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of the environment, without anything that matches SECRET_PATTERNS (any case)."""
    env = dict(os.environ if base is None else base)
    return {name: value for name, value in env.items()
            if (name in ALLOWED_ENV or name.startswith(ALLOWED_ENV_PREFIXES)) and not is_secret(name)}


# Set in verify's and autokernel.optimize's sandboxed children (autokernel/verify/isolated.py): what runs there knows
# that no sandbox nests in it and the home folder is hidden; autokernel.optimize called there refuses.
SANDBOXED_CHILD_VARIABLE = "AUTOKERNEL_SANDBOXED_CHILD"

# Candidates' compiler caches, one folder per kernel source (caches_for), the most recently used kept. A folder that
# outgrew what compiler caches need (Triton's and a CUDA build's are megabytes) is not kept, even a passing
# candidate's: whatever else it holds was put there by the candidate (runner.run_bench).
CANDIDATE_CACHES_KEPT = 32
CANDIDATE_CACHE_LIMIT_BYTES = 256 << 20
CANDIDATE_CACHE_LIMIT_ENTRIES = 20_000


# Every value secrets_withheld took out of this process's environment (autokernel/sandbox/redact.py reads them).
WITHHELD_VALUES: set[str] = set()


def is_secret(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in SECRET_PATTERNS)


@contextlib.contextmanager
def secrets_withheld():
    """Take every variable that looks like a credential out of this process's environment while the block runs.

    The LLM agents read their key once, when they are made; the loop then runs with none in os.environ,
    so no child of the run can inherit one. They are put back afterwards (autokernel.optimize runs in
    the user's own process)."""
    withheld = {name: os.environ.pop(name) for name in list(os.environ) if is_secret(name)}
    WITHHELD_VALUES.update(withheld.values())   # no longer in os.environ: redact.scrub still takes them out
    try:
        yield sorted(withheld)
    finally:
        os.environ.update(withheld)


def candidate_cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autokernel" / "candidates"


def caches_in(folder: str | Path) -> dict[str, str]:
    """The compiler-cache variables, each naming a folder under `folder` (made here)."""
    caches = {name: str(Path(folder) / sub) for name, sub in CACHE_FOLDERS.items()}
    for path in caches.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    return caches


def cache_folder_of(kernel_path: str | Path) -> Path:
    """Where caches_for keeps the caches of this kernel source (nothing is made)."""
    return candidate_cache_root() / hashlib.sha256(Path(kernel_path).read_bytes()).hexdigest()[:32]


def caches_for(kernel_path: str | Path) -> Path:
    """The compiler-cache folder of one kernel source: only a bench of these very bytes reads or writes it.

    A cache a candidate wrote is code it chose (Triton's cubins and its launcher's shared object,
    Inductor's modules, CUDA builds). Shared between experiments, one candidate could plant a
    compiled kernel under the key of another's source, or of the kept kernel that verify loads. Keyed
    by the file's own bytes, a folder only ever serves the same code again (a baseline's second run,
    a screened candidate's full judge), which could have done the same thing itself. Nothing outside
    the sandbox reads these folders: verify and plug_in compile in caches of their own. A candidate
    that does not PASS loses its folder (runner.run_bench): nothing a rejected candidate wrote outlives it.
    """
    root = candidate_cache_root()
    folder = cache_folder_of(kernel_path)
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)
    with contextlib.suppress(OSError):
        kept = sorted(root.iterdir(), key=lambda entry: entry.stat().st_mtime, reverse=True)
        for stale in kept[CANDIDATE_CACHES_KEPT:]:
            remove_tree(str(stale))
    return folder


def remove_tree(folder: str | Path) -> bool:
    """Remove a folder a candidate could write, and everything in it, without following any link it planted.

    Every directory is opened with O_NOFOLLOW and emptied through its descriptor; a link is unlinked, never
    resolved. Where the candidate took its own permissions away (a folder it made unreadable, or read-only with a
    link inside), they are given back to the folder itself, through its descriptor: shutil.rmtree's onerror
    chmod'ed by path, and so the file a planted link named. A link or file in the folder's own place is unlinked.
    Returns whether the folder is gone; never raises (it runs in cleanups)."""
    folder = os.path.abspath(folder)
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            os.unlink(folder)
            return True
        parent = os.open(os.path.dirname(folder), os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        _remove_directory(parent, os.path.basename(folder))
    finally:
        os.close(parent)
    return not os.path.lexists(folder)


def _remove_directory(parent: int, name: str) -> None:
    """Empty and remove the directory `name` of the directory open at `parent` (errors end only its own part)."""
    try:
        fd = _open_directory(parent, name)
    except OSError:
        return
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
            os.fchmod(fd, 0o700)            # the directory itself, by descriptor: its entries can go
        with os.scandir(fd) as listing:
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
        for entry, is_directory in entries:
            with contextlib.suppress(OSError):
                if is_directory:
                    _remove_directory(fd, entry)
                else:
                    os.unlink(entry, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=parent)


def _open_directory(parent: int, name: str) -> int:
    """A descriptor of the directory `name` (never of what a link there names), made searchable where it was not."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=parent)
    except PermissionError:
        # Unreadable: its mode is given back through an O_PATH descriptor of the directory itself, then opened anew
        # through that descriptor (/proc/self/fd names the very inode, not a path a link could redirect).
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
            return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY)
        finally:
            os.close(handle)


def outgrown(folder: str | Path) -> bool:
    """Whether a candidate's cache folder holds more than compiler caches need (CANDIDATE_CACHE_LIMIT_*)."""
    size, entries = tree_size(folder, stop_at_bytes=CANDIDATE_CACHE_LIMIT_BYTES,
                              stop_at_entries=CANDIDATE_CACHE_LIMIT_ENTRIES)
    return size > CANDIDATE_CACHE_LIMIT_BYTES or entries > CANDIDATE_CACHE_LIMIT_ENTRIES


def tree_size(folder: str | Path, *, stop_at_bytes: int, stop_at_entries: int) -> tuple[int, int]:
    """(bytes, entries) under folder, links not followed, sparse files at their full length; the count stops once
    past either limit (a candidate's folder can hold a million files)."""
    total = entries = 0
    pending = [str(folder)]
    while pending and total <= stop_at_bytes and entries <= stop_at_entries:
        try:
            with os.scandir(pending.pop()) as listing:
                for entry in listing:
                    entries += 1
                    info = entry.stat(follow_symlinks=False)
                    total += max(info.st_size, info.st_blocks * 512)
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            continue
    return total, entries
