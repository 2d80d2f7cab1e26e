"""Optimized kernel files as things a model can call: imported once, and registered as ops torch.compile can trace.

Eagerly, a routed call runs the file's kernel_fn directly: a dispatcher round trip through a
custom op costs tens of microseconds, more than many of these kernels take. Inside torch.compile
the call goes through an op instead, so that Dynamo traces it without a graph break:
  - a Triton op (torch.library.triton_op) where the installed torch has it and the kernel_fn traces
    on fake tensors: Inductor then sees the Triton kernels themselves and launches them from its own
    generated code. The kernel file launches its kernels as `kernel[grid](...)`; a second copy of
    the module is imported in which each kernel launched from Python is wrapped with
    torch.library.wrap_triton, which is what a Triton op requires.
  - otherwise an opaque custom op (torch.library.custom_op) whose fake implementation is the
    type's reference: older torch releases, the CPU interpreter (its kernels cannot be traced), and
    kernel_fns that read data pointers or values (which fake tensors do not have), and CUDA C++ kernel
    files (BACKEND = "cuda"), whose compiled kernels Inductor cannot see into: they go straight to
    the custom op, without importing a second, traceable copy of the file.
"""

from __future__ import annotations

import ast
import inspect
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection

import torch

from autokernel.core.contracts import ManifestEntry
from autokernel.core.dtypes import DTYPES, dtype_name
from autokernel.core.kernel_file import import_file
from autokernel.judge.cuda_launches import is_cuda_file
from autokernel.kernel_types import registry
from autokernel.routing.manifest import (PlugInError, RouteRecord, read_manifest, route_records, shape_key,
                                          source_digest)

HAS_TRITON_OP = hasattr(torch.library, "triton_op") and hasattr(torch.library, "wrap_triton")


@dataclass
class OptimizedKernel:
    """One optimized kernel file, where it was verified, where it was measured to win, and its ops."""
    name: str                       # the manifest's key, "<rank>_<type>"
    kernel_type: str
    rank: int
    file: Path
    shapes: list[dict]
    dtypes: frozenset
    kernel_fn: Callable
    source_sha256: str
    records: dict[tuple[str, str], RouteRecord] = field(default_factory=dict)
    _graph_op: Callable | None = None
    op_kind: str = ""               # "triton_op", or "custom_op (why not a Triton op)", once chosen
    backend: str = "triton"         # the file's BACKEND: "cuda" for a CUDA C++ kernel file

    def covers(self, shape: dict, dtype: torch.dtype) -> bool:
        return dtype in self.dtypes and shape in self.shapes

    def record(self, shape: dict, dtype: torch.dtype) -> RouteRecord | None:
        return self.records.get((shape_key(shape), dtype_name(dtype)))

    @property
    def variant(self) -> str | None:
        """The variant a file of several runs (a region's starter: Inductor's template or the GEMM engine's tile),
        as its TUNABLES name it; None for a file of one."""
        tunables = getattr(self.kernel_fn, "__globals__", {}).get("TUNABLES")
        variant = tunables.get("variant") if isinstance(tunables, dict) else None
        return variant if isinstance(variant, str) else None

    @property
    def op_name(self) -> str:
        return f"{self.kernel_type}_{self.rank}_{self.source_sha256[:12]}"

    def graph_op(self, example_args: tuple | None = None) -> Callable:
        """The op torch.compile traces for this kernel, chosen once (on the first example call when there is one).

        example_args are the arguments of one real kernel_fn call: the Triton op is tried on fake
        tensors like them before torch.compile ever meets it.
        """
        if self._graph_op is None:
            if self.backend == "cuda":
                op, why_not = None, "a CUDA C++ kernel: Inductor cannot trace into it"
            elif HAS_TRITON_OP:
                op, why_not = _triton_op(self, example_args)
            else:
                op, why_not = None, "torch has no triton_op"
            self._graph_op = op or _custom_op(self.op_name, self.kernel_type, self.kernel_fn)
            self.op_kind = "triton_op" if op else f"custom_op ({why_not})"
        return self._graph_op

    def use_opaque_op(self, why: str) -> None:
        """Trace this kernel as an opaque custom op from now on (its Triton op failed inside torch.compile)."""
        self._graph_op = _custom_op(self.op_name, self.kernel_type, self.kernel_fn)
        self.op_kind = f"custom_op ({why})"


def load_kernels(optimized_dir: str | Path, device_name: str, *, exclude: Collection[str] = (),
                 on_failure: Callable[[str, Exception], None] | None = None) -> list[OptimizedKernel]:
    """The kernels that optimized_dir/manifest.json lists, imported, by rank, with their route tables for this device.

    `exclude` names entries to leave out. A kernel that fails to load raises, unless `on_failure` is given: then it
    is told (name, error) and the kernel is left out (verify drops a broken kernel and checks the rest)."""
    folder = Path(optimized_dir)
    manifest_path = folder / "manifest.json"
    entries = read_manifest(manifest_path)
    kernels = []
    for name, entry in entries.items():
        if name in exclude:
            continue
        try:
            kernels.append(_load_kernel(folder, name, entry, manifest_path, device_name))
        except Exception as exc:        # a kernel file's import runs its code: anything can come out of it
            if on_failure is None:
                raise
            on_failure(name, exc)
    return sorted(kernels, key=lambda kernel: kernel.rank)


def _load_kernel(folder: Path, name: str, entry: dict, manifest_path: Path, device_name: str) -> OptimizedKernel:
    where = f"manifest entry {name!r} in {manifest_path}"
    try:
        record = ManifestEntry.from_json(entry)
        kernel_type, rank, file = record.kernel_type, int(record.rank), folder / record.file
        shapes, dtype_names = [dict(shape) for shape in record.shapes], list(record.dtypes)
    except (KeyError, TypeError, ValueError) as exc:
        raise PlugInError(f"{where} is malformed ({type(exc).__name__}: {exc}); each entry needs file, "
                          "kernel_type, rank, shapes and dtypes") from exc
    if not registry.known(kernel_type):
        raise PlugInError(f"{where} names an unknown kernel type {kernel_type!r}; known: "
                          f"{', '.join(registry.REGISTRY)}, and regions with a file in {folder / 'regions'}")
    unknown = [d for d in dtype_names if d not in DTYPES]
    if unknown:
        raise PlugInError(f"{where} lists unknown dtypes {unknown}; expected some of {', '.join(DTYPES)}")
    if not file.is_file():
        raise PlugInError(f"{where} points at {file}, which does not exist")
    source = file.read_text()
    sha = source_digest(source)
    module = _import_kernel(file, source, sha)
    kernel_fn = getattr(module, "kernel_fn", None)
    if getattr(module, "KERNEL_TYPE", None) != kernel_type or not callable(kernel_fn):
        raise PlugInError(f"{file} has KERNEL_TYPE {getattr(module, 'KERNEL_TYPE', None)!r} and kernel_fn "
                          f"{kernel_fn!r}, but {where} says it is a {kernel_type!r} kernel")
    records = {(shape_key(record.shape), record.dtype): record for record in route_records(entry, sha, device_name)}
    return OptimizedKernel(name=name, kernel_type=kernel_type, rank=rank, file=file, shapes=shapes,
                           dtypes=frozenset(DTYPES[d] for d in dtype_names), kernel_fn=kernel_fn,
                           source_sha256=sha, records=records, backend="cuda" if is_cuda_file(source) else "triton")


def _import_kernel(file: Path, source: str, sha: str, *, traceable: bool = False):
    # Named by content: the same file loaded twice is imported once, two versions never collide.
    module_name = f"autokernel_optimized_{file.stem}_{sha[:12]}{'_traceable' if traceable else ''}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    try:
        module = import_file(file, module_name)
    except Exception as exc:
        raise PlugInError(f"importing {file} failed: {type(exc).__name__}: {exc}") from exc
    if traceable:
        for kernel_name in launched_kernels(source):
            kernel = getattr(module, kernel_name, None)
            if kernel is not None and _is_triton_kernel(kernel):
                setattr(module, kernel_name, torch.library.wrap_triton(kernel))
    sys.modules[module_name] = module
    return module


def launched_kernels(source: str) -> set[str]:
    """The module-level names launched as `name[grid](...)` from the file's Python code (not from its Triton code)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(node.func.value,
                                                                                              ast.Name):
            names.add(node.func.value.id)
    return names


def _is_triton_kernel(obj) -> bool:
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    return isinstance(obj, (JITFunction, Autotuner, Heuristics))


_OPS: dict[str, Callable] = {}


def _custom_op(op_name: str, kernel_type: str, kernel_fn: Callable) -> Callable:
    """The kernel as an opaque custom op with the reference's schema; the reference on fake tensors gives its output."""
    # An op name can be registered once per process: with the source hash in it, two versions of
    # one rank and type (two runs) coexist, and a file loaded again reuses its op.
    if op_name not in _OPS:
        reference_fn = registry.get(kernel_type).reference
        op = torch.library.custom_op(f"autokernel::{op_name}", kernel_fn, mutates_args=(),
                                     schema=torch.library.infer_schema(reference_fn, mutates_args=()))
        op.register_fake(reference_fn)
        _OPS[op_name] = op
    return _OPS[op_name]


def _triton_op(kernel: OptimizedKernel, example_args: tuple | None) -> tuple[Callable | None, str]:
    """The kernel as a Triton op Inductor can see into, or None and why not."""
    if not torch.cuda.is_available():
        return None, "the CPU interpreter's kernels cannot be traced"
    name = f"{kernel.op_name}_triton"
    if name not in _OPS:
        module = _import_kernel(kernel.file, kernel.file.read_text(), kernel.source_sha256, traceable=True)
        traceable_fn = module.kernel_fn

        def implementation(*args, **kwargs):
            return traceable_fn(*args, **kwargs)
        # The op's schema is the reference's, whatever annotations the kernel file wrote.
        implementation.__signature__ = inspect.signature(registry.get(kernel.kernel_type).reference)
        implementation.__annotations__ = dict(registry.get(kernel.kernel_type).reference.__annotations__)
        try:
            _OPS[name] = torch.library.triton_op(f"autokernel::{name}", implementation, mutates_args=())
        except Exception as exc:      # a schema torch cannot infer: the opaque op still works
            return None, f"triton_op refused it: {type(exc).__name__}: {exc}".splitlines()[0]
    op = _OPS[name]
    if example_args is not None:
        why_not = _fails_on_fake_tensors(op, example_args)
        if why_not:
            return None, why_not
    return op, ""


def _fails_on_fake_tensors(op: Callable, example_args: tuple) -> str:
    """Why the op cannot be traced as torch.compile traces it (fake, functionalized tensors), or "" when it can."""
    from torch._subclasses.functional_tensor import dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with warnings.catch_warnings():
            # torch releases that still allow a fake tensor's data pointer warn where Dynamo fails.
            warnings.simplefilter("error")
            # Functionalized in Python, as AOTAutograd does: only then is a Triton op taken apart into its launches.
            graph = make_fx(dispatch_functionalize(lambda *args: op(*args)), tracing_mode="fake")(*example_args)
    except Exception as exc:
        return f"it does not trace on fake tensors: {type(exc).__name__}: {exc}".splitlines()[0][:200]
    return _untraceable_launch(graph)


def _untraceable_launch(graph: torch.fx.GraphModule) -> str:
    """Why Inductor cannot launch a kernel of the traced op from its own code, or "".

    Triton's host-side TMA descriptor (triton.tools.tensor_descriptor.TensorDescriptor) passes the trace as a
    constant argument holding a fake tensor; Inductor (torch 2.11) then fails on it while compiling the whole
    graph ("tolist() shouldn't be called on a tensor with unallocated storage"), and every Triton op of the model
    had to fall back. Found here, the one kernel is an opaque op from the start."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    for node in graph.graph.nodes:
        if node.op != "call_function" or "triton_kernel_wrapper" not in str(node.target):
            continue
        for name, value in kernel_side_table.get_constant_args(node.kwargs["constant_args_idx"]).items():
            if isinstance(value, torch.Tensor) or hasattr(value, "base") and isinstance(value.base, torch.Tensor):
                kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
                while hasattr(kernel, "fn"):            # an autotuner's JITFunction, a JITFunction's Python function
                    kernel = kernel.fn
                return (f"its kernel {getattr(kernel, '__name__', kernel)} takes {name} as a "
                        f"{type(value).__name__} (a host-side TMA descriptor), which Inductor cannot launch")
    return ""
