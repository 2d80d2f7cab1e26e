"""Compiles a CUDA kernel file's CUDA_SOURCE into a Python extension, once per distinct build.

A CUDA kernel file (BACKEND = "cuda") calls `load_cuda(CUDA_SOURCE, ["entry"], TUNABLES)` at import.
The build goes through torch.utils.cpp_extension.load_inline, the standard route, into a folder
named by a hash of everything that changes the binary: the source, the entry points, the tunables
(written as #defines above the source), the compiler flags, the torch and CUDA versions and the
GPU's compute capability. A later import with the same hash loads the built library without
invoking ninja or nvcc at all, so a re-run (and every judge run of an unchanged kernel) does not
recompile.

The cache lives under $AUTOKERNEL_CUDA_CACHE, else $XDG_CACHE_HOME/autokernel/cuda (~/.cache/...).
Under the judge, $AUTOKERNEL_CUDA_CACHE is the candidate's own (sandbox/child_env.py, caches_for: one folder per
kernel source, written by benches of those very bytes alone), so no candidate can plant a build
that another kernel, verify or plug_in would load; verify's sandboxed child builds in a private
folder. A build folder is only trusted once its marker file exists, which the build writes last.

A compile error raises CudaCompileError whose first line is the compiler's first error, with its
line number in CUDA_SOURCE: the source is preceded by `#line 1 "CUDA_SOURCE"`, so nvcc reports
lines of the kernel's own string whatever load_inline and the #defines put above it. The judge's
worker reports an exception's first line as the CRASH message (worker.crash_message).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from pathlib import Path

CACHE_ENV = "AUTOKERNEL_CUDA_CACHE"
SOURCE_LABEL = "CUDA_SOURCE"
BUILT_MARKER = "autokernel-built"
DEFAULT_CUDA_FLAGS = ("-O3", "-lineinfo")   # no fast math: the judge compares with float32 references
# Hopper's wgmma, TMA (cp.async.bulk.tensor) and setmaxnreg exist only in sm_90a, the arch-specific
# target, not in the plain sm_90 that torch builds for an H100. A kernel that uses them passes these
# flags (sm90a_flags) and keeps that code under AUTOKERNEL_SM90A, defined for nvcc's host and device
# passes alike. Given a -gencode, torch adds no arch flags of its own, so sm_90a is the only target.
SM90A_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a", "-DAUTOKERNEL_SM90A=1")
# Tunable names become preprocessor macros: they must be identifiers, their values plain numbers or booleans.
_MACRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# nvcc: "path(12): error: ..." (also "error #20: ..."); gcc/clang style: "path:12:5: error: ...".
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?:catastrophic )?error\b[^:]*: (?P<text>.*)$")
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<text>.*)$")


class CudaCompileError(RuntimeError):
    """The CUDA source did not compile; the first line says where and why, the rest is the build log."""


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autokernel" / "cuda"


def defines(tunables: dict | None) -> str:
    """TUNABLES as #define lines (True/False as 1/0), in a fixed order so the hash is stable."""
    lines = []
    for name, value in sorted((tunables or {}).items()):
        if not _MACRO_NAME.match(str(name)):
            raise ValueError(f"tunable {name!r} cannot be a CUDA macro: use an identifier")
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float)):
            raise ValueError(f"tunable {name} = {value!r}: a CUDA tunable must be a number or a boolean")
        lines.append(f"#define {name} {value!r}")
    return "\n".join(lines)


def full_source(source: str, tunables: dict | None) -> str:
    """What nvcc compiles: the tunables' #defines, then the kernel's source numbered from its own line 1."""
    return f"{defines(tunables)}\n#line 1 \"{SOURCE_LABEL}\"\n{source}"


def device_capability() -> str:
    import torch

    if not torch.cuda.is_available():
        return "no-gpu"
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def sm90a_flags() -> list[str]:
    """SM90A_FLAGS on an sm_90 GPU (H100, H200) with a torch built for CUDA 12 or later (whose nvcc
    knows sm_90a), else none: there the source builds for the GPU's own target, without that code."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return []
    if int((torch.version.cuda or "0").split(".")[0]) < 12:
        return []
    return list(SM90A_FLAGS)


def build_key(source: str, functions: list[str], flags: list[str], torch_version: str, capability: str) -> str:
    """A hash of everything that changes the built library; its first 16 hex digits name the build."""
    payload = "\0".join([source, ",".join(functions), " ".join(flags), torch_version, capability])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def host_declarations(source: str, functions: list[str]) -> str:
    """The C++ declarations of the entry points, read from their definitions in the source.

    load_inline binds `functions` from its C++ side, which must declare them; reading them from
    CUDA_SOURCE keeps the kernel file to one source string.
    """
    uncommented = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    declarations = []
    for name in functions:
        found = re.search(rf"^[ \t]*([A-Za-z_][^;{{}}#()]*?\b{re.escape(name)}\s*\([^;{{}}]*?\))\s*\{{",
                          uncommented, re.M)
        if not found:
            raise ValueError(f"{SOURCE_LABEL} defines no host function {name}(...): an entry point is a "
                             f"definition such as `torch::Tensor {name}(torch::Tensor x) {{` at the start of a line")
        declarations.append(" ".join(found.group(1).split()) + ";")
    return "\n".join(declarations)


def first_error(log: str) -> tuple[str, int | None] | None:
    """(the compiler's first error text, its line in CUDA_SOURCE or None) from a build log, or None if none."""
    for raw in log.splitlines():
        line = raw.strip()
        match = _NVCC_ERROR.match(line) or _GCC_ERROR.match(line)
        if match:
            in_source = Path(match["file"]).name == SOURCE_LABEL or match["file"].endswith(f'"{SOURCE_LABEL}"')
            return match["text"].strip(), int(match["line"]) if in_source else None
    for raw in log.splitlines():
        if "error" in raw.lower() and "Error building extension" not in raw:
            return raw.strip(), None
    return None


def compile_error(log: str, name: str) -> CudaCompileError:
    found = first_error(log)
    if found is None:
        headline = f"CUDA build of {name} failed (no compiler error in its log)"
    else:
        text, line = found
        where = f"{SOURCE_LABEL} line {line}" if line is not None else "outside CUDA_SOURCE (generated bindings)"
        headline = f"CUDA compile error at {where}: {text}"
    return CudaCompileError(f"{headline}\n{log}")


def _import_built(name: str, build_dir: Path):
    """The built extension, imported from its shared library (what load_inline does after a build)."""
    spec = importlib.util.spec_from_file_location(name, build_dir / f"{name}.so")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_cuda(source: str, functions: list[str], tunables: dict | None = None,
              extra_cuda_cflags: list[str] | None = None, extra_ldflags: list[str] | None = None):
    """The compiled extension for `source` (its `functions` bound to Python), built once and cached."""
    import torch
    from torch.utils import cpp_extension

    if not torch.cuda.is_available():
        raise RuntimeError("a CUDA kernel file needs an NVIDIA GPU, nvcc and a CUDA build of torch: torch sees no "
                           "GPU here")
    flags = [*DEFAULT_CUDA_FLAGS, *(extra_cuda_cflags or [])]
    ldflags = list(extra_ldflags or [])
    cuda_source = full_source(source, tunables)
    cpp_source = host_declarations(source, functions)
    key = build_key(cuda_source + "\0" + cpp_source, list(functions), flags + ["--ld"] + ldflags, torch.__version__,
                    f"{device_capability()} cuda {torch.version.cuda}")
    name = f"autokernel_cuda_{key}"
    build_dir = cache_root() / name
    if (build_dir / BUILT_MARKER).is_file() and (build_dir / f"{name}.so").is_file():
        return _import_built(name, build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        module = cpp_extension.load_inline(name=name, cpp_sources=cpp_source, cuda_sources=cuda_source,
                                           functions=list(functions), extra_cuda_cflags=flags, extra_ldflags=ldflags,
                                           build_directory=str(build_dir), verbose=False, with_cuda=True)
    except RuntimeError as exc:
        if "Error building extension" in str(exc):
            raise compile_error(str(exc), name) from None
        raise
    (build_dir / BUILT_MARKER).write_text(key + "\n")
    return module
