"""Plugs optimized kernels into a model: each call runs a kernel verified at its shape and dtype, else PyTorch.

optimized_kernels/manifest.json (orchestrate.py writes it) lists each kernel file with the shapes
and dtypes bench.py verified it at. Each kernel becomes a custom op `autokernel::<type>_<rank>_<hash
of its source>` whose fake implementation is the type's reference, so torch.compile can trace a
routed model; outside a graph the kernel is called directly (the op's dispatcher round trip costs
tens of microseconds). Once plug_in(model) has patched the model's forward, torch functions reach
the Router through a TorchFunctionMode during the forward, and modules a kernel replaces (norms,
gated MLPs, rotary embeddings) through their swapped forwards; autokernel/routes.py reads each
call as a registry shape and kernel arguments. What such a module computes is inferred from its
structure, so its first routed call is checked against its own forward (output_error within the
dtype's tolerance), and the route is dropped if it differs.
A call runs a kernel only when the shape dict built from it, exactly as the profiler builds it, is
one the kernel was verified at, in a verified dtype; anything else runs in PyTorch, and the Router
counts hits and fallbacks (with reasons) per kernel. Inference only: calls needing gradients or
under autocast fall back.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from autokernel import paths, registry, routes

# Without a GPU the kernels run in Triton's interpreter, which must be chosen before triton is
# imported, and torch._dynamo (torch.compile, torch.compiler.disable below) imports it.
_INTERPRETER_CHOSEN_TOO_LATE = False
if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    _INTERPRETER_CHOSEN_TOO_LATE = "triton" in sys.modules
    os.environ["TRITON_INTERPRET"] = "1"

# The largest error, relative to the output's scale (its largest finite magnitude), at which a
# routed output still counts as the model's own: the per-dtype bar of verify.py and of each
# module route's first-call check.
TOLERANCES = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4}
DTYPES = {str(dtype).removeprefix("torch."): dtype for dtype in TOLERANCES}
ROUTER_ATTRIBUTE = "_autokernel_router"
_NOT_PATCHED = object()


class PlugInError(Exception):
    """Optimized kernels cannot be loaded or plugged in; the message says why and what to do."""


# --------------------------------------------------------------------------- comparing outputs
def tolerance(output) -> float:
    """The error bar for a model output: by the dtype of its first float tensor (float32's for other dtypes)."""
    dtype = next((t.dtype for t in _tensors(output) if t.is_floating_point()), torch.float32)
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def output_error(expected, actual) -> float:
    """The largest error of any tensor in `actual` against `expected`, relative to that tensor's scale.

    Outputs are compared tensor by tensor, through tuples, lists and mappings (a Hugging Face
    ModelOutput). A tensor's error is max |actual - expected| / max |expected| (finite entries; a
    scale of 0 counts as 1). Entries equal in both (the same inf, nan in both) are exact; any other
    nan or inf, a differing number of tensors, shape or dtype, or a differing non-float tensor
    (ids, masks) is inf.
    """
    expected_tensors, actual_tensors = _tensors(expected), _tensors(actual)
    if len(expected_tensors) != len(actual_tensors):
        return math.inf
    return max((_tensor_error(e, a) for e, a in zip(expected_tensors, actual_tensors)), default=0.0)


def _tensors(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, Mapping) else output if isinstance(output, (list, tuple)) else ()
    return [tensor for value in values for tensor in _tensors(value)]


def _tensor_error(expected: torch.Tensor, actual) -> float:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return math.inf
    if not expected.is_floating_point():
        return 0.0 if torch.equal(expected, actual) else math.inf
    if expected.numel() == 0:
        return 0.0
    e, a = expected.float(), actual.float()
    same = (e == a) | (e.isnan() & a.isnan())
    diff = torch.where(same, 0.0, (a - e).abs()).nan_to_num(nan=math.inf)
    magnitudes = e.abs()[e.isfinite()]
    scale = magnitudes.max().item() if magnitudes.numel() else 0.0
    return diff.max().item() / (scale or 1.0)


# --------------------------------------------------------------------------- loading the kernels
@dataclass
class OptimizedKernel:
    """One optimized kernel file, the shapes and dtypes it was verified at, and its custom op."""
    name: str                       # the manifest's key, "<rank>_<type>"
    kernel_type: str
    rank: int
    file: Path
    shapes: list[dict]
    dtypes: frozenset
    kernel_fn: Callable
    op: Callable

    def covers(self, shape: dict, dtype: torch.dtype) -> bool:
        return dtype in self.dtypes and shape in self.shapes

    def launch(self, args: tuple) -> torch.Tensor:
        return self.op(*args) if torch.compiler.is_compiling() else self.kernel_fn(*args)


_CUSTOM_OPS: dict[str, Callable] = {}


def manifest_entry(job: dict, file: str | Path) -> dict:
    """The manifest entry load_kernels reads for one kernel, from its job (or plan entry: the same fields).

    `file` is relative to the manifest's folder, or absolute; the shapes and the dtype are those
    bench.py verified the kernel at.
    """
    return {"file": str(file), "kernel_type": job["kernel_type"], "rank": job["rank"], "shapes": job["shapes"],
            "dtypes": [job["dtype"]]}


def read_manifest(manifest_path: Path) -> dict[str, dict]:
    """The manifest's kernels, name -> entry; PlugInError when it is missing or not a manifest."""
    if not manifest_path.is_file():
        raise PlugInError(f"no optimized kernels: {manifest_path} does not exist; run `autokernel optimize` "
                          f"first, or point at the folder that holds {paths.MANIFEST_NAME}")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise PlugInError(f"{manifest_path} is not valid JSON ({exc})") from exc
    entries = manifest.get("kernels") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict):
        raise PlugInError(f"{manifest_path} has no \"kernels\" object, so it is not a manifest orchestrate.py wrote")
    return entries


def write_manifest(manifest_path: Path, entries: dict[str, dict]) -> None:
    """Write the manifest listing these kernels (name -> entry), making its folder."""
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps({"kernels": entries}, indent=2) + "\n")


def slower_than_pytorch(optimized_dir: str | Path = paths.OPTIMIZED_DIR) -> dict[str, float]:
    """Kernels the loop measured on a GPU as slower than PyTorch at their own job shapes: name -> speedup.

    Plugging such a kernel in can only slow the model down, so plug_in leaves them out unless asked.
    """
    entries = read_manifest(Path(optimized_dir) / paths.MANIFEST_NAME)
    return {name: entry["best_speedup_vs_pytorch"] for name, entry in entries.items()
            if entry.get("timings_meaningful") and entry.get("best_speedup_vs_pytorch") is not None
            and entry["best_speedup_vs_pytorch"] < 1.0}


def load_kernels(optimized_dir: str | Path = paths.OPTIMIZED_DIR, *, include_slower: bool = False
                 ) -> list[OptimizedKernel]:
    """The kernels that optimized_dir/manifest.json lists, imported and registered, by rank.

    Kernels measured as slower than PyTorch (slower_than_pytorch) are left out unless include_slower.
    """
    folder = Path(optimized_dir)
    manifest_path = folder / paths.MANIFEST_NAME
    slower = {} if include_slower else slower_than_pytorch(folder)
    entries = {name: entry for name, entry in read_manifest(manifest_path).items() if name not in slower}
    if _INTERPRETER_CHOSEN_TOO_LATE:
        raise PlugInError("there is no CUDA GPU, so the kernels must run in Triton's interpreter, but triton was "
                          "imported before autokernel could switch it on: set TRITON_INTERPRET=1 in the environment")
    return sorted((_load_kernel(folder, name, entry, manifest_path) for name, entry in entries.items()),
                  key=lambda kernel: kernel.rank)


def _load_kernel(folder: Path, name: str, entry: dict, manifest_path: Path) -> OptimizedKernel:
    where = f"manifest entry {name!r} in {manifest_path}"
    try:
        kernel_type, rank, file = entry["kernel_type"], int(entry["rank"]), folder / entry["file"]
        shapes, dtype_names = [dict(shape) for shape in entry["shapes"]], list(entry["dtypes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PlugInError(f"{where} is malformed ({type(exc).__name__}: {exc}); each entry needs file, "
                          "kernel_type, rank, shapes and dtypes") from exc
    if kernel_type not in registry.REGISTRY:
        raise PlugInError(f"{where} names an unknown kernel type {kernel_type!r}; "
                          f"known: {', '.join(registry.REGISTRY)}")
    unknown = [d for d in dtype_names if d not in DTYPES]
    if unknown:
        raise PlugInError(f"{where} lists unknown dtypes {unknown}; expected some of {', '.join(DTYPES)}")
    if not file.is_file():
        raise PlugInError(f"{where} points at {file}, which does not exist")
    source = file.read_text()
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module = _import_kernel(file, digest)
    kernel_fn = getattr(module, "kernel_fn", None)
    if getattr(module, "KERNEL_TYPE", None) != kernel_type or not callable(kernel_fn):
        raise PlugInError(f"{file} has KERNEL_TYPE {getattr(module, 'KERNEL_TYPE', None)!r} and kernel_fn "
                          f"{kernel_fn!r}, but {where} says it is a {kernel_type!r} kernel")
    return OptimizedKernel(name=name, kernel_type=kernel_type, rank=rank, file=file, shapes=shapes,
                           dtypes=frozenset(DTYPES[d] for d in dtype_names), kernel_fn=kernel_fn,
                           op=_custom_op(f"{kernel_type}_{rank}_{digest}", kernel_type, kernel_fn))


def _import_kernel(file: Path, digest: str):
    # Named by content: the same file loaded twice is imported once, two versions never collide.
    module_name = f"autokernel_optimized_{file.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise PlugInError(f"importing {file} failed: {type(exc).__name__}: {exc}") from exc
    sys.modules[module_name] = module
    return module


def _custom_op(op_name: str, kernel_type: str, kernel_fn: Callable) -> Callable:
    """The kernel as a custom op with the reference's schema; the reference on fake tensors gives its output."""
    # An op name can be registered once per process: with the source hash in it, two versions of
    # one rank and type (two runs) coexist, and a file loaded again reuses its op.
    if op_name not in _CUSTOM_OPS:
        reference_fn = registry.get(kernel_type).reference
        op = torch.library.custom_op(f"autokernel::{op_name}", kernel_fn, mutates_args=(),
                                     schema=torch.library.infer_schema(reference_fn, mutates_args=()))
        op.register_fake(reference_fn)
        _CUSTOM_OPS[op_name] = op
    return _CUSTOM_OPS[op_name]


# --------------------------------------------------------------------------- the router
@dataclass
class ModuleRoute:
    path: str
    module_class: str
    candidates: list[routes.ModuleVariant]
    checked: routes.ModuleVariant | None = None     # the variant whose first call matched the module's own forward
    rejections: list[str] = field(default_factory=list)


@dataclass
class KernelStats:
    hits: int = 0
    fallbacks: int = 0
    reasons: Counter = field(default_factory=Counter)   # why calls fell back, and how often


class Router:
    """Decides, call by call, whether an optimized kernel runs, and keeps the counts."""

    def __init__(self, kernels: list[OptimizedKernel]):
        self.kernels = kernels
        self.by_type: dict[str, list[OptimizedKernel]] = {}
        for kernel in kernels:
            self.by_type.setdefault(kernel.kernel_type, []).append(kernel)
        self.function_routes = {func: route for func, route in routes.FUNCTION_ROUTES.items()
                                if route[0] in self.by_type}
        self.module_routes: list[ModuleRoute] = []
        self.patches: list[tuple[nn.Module, object]] = []    # (module, its instance forward before), in order
        self.reset_stats()

    def reset_stats(self) -> None:
        self.stats = {kernel.name: KernelStats() for kernel in self.kernels}

    def choose(self, kernel_type: str, call: routes.Call | str) -> tuple[OptimizedKernel | None, str]:
        """The kernel verified for this call, or None and why not."""
        if isinstance(call, str):
            return None, call
        first = call.tensors[0]
        dtype = first.dtype
        if torch.is_grad_enabled() and any(t.requires_grad for t in call.tensors):
            return None, "inputs need gradients (the kernels are inference only)"
        if torch.is_autocast_enabled(first.device.type):
            return None, "autocast is on"
        if any(t.dtype != dtype for t in call.tensors):
            return None, f"mixed dtypes {sorted({str(t.dtype).removeprefix('torch.') for t in call.tensors})}"
        kernels = self.by_type[kernel_type]
        kernel = next((k for k in kernels if k.covers(call.shape, dtype)), None)
        if kernel is not None:
            return kernel, ""
        if not any(dtype in k.dtypes for k in kernels):
            return None, f"dtype {str(dtype).removeprefix('torch.')} not verified"
        return None, f"shape {registry.format_shape(call.shape)} not verified"

    def count(self, kernel: OptimizedKernel, reason: str | None = None) -> None:
        """One hit, or with a reason one fallback; not while torch.compile traces (it would bake the count in)."""
        if torch.compiler.is_compiling():
            return
        stats = self.stats[kernel.name]
        if reason is None:
            stats.hits += 1
        else:
            stats.fallbacks += 1
            stats.reasons[reason] += 1

    def run_model(self, original: Callable, args: tuple, kwargs: dict):
        """The model's own forward, with the routing mode on."""
        with _RoutingMode(self):
            return original(*args, **kwargs)

    def run_function(self, kernel_type: str, prepare: Callable, args: tuple, kwargs: dict):
        """The kernel's result for one torch function call, or None to let PyTorch run it."""
        try:
            call = prepare(*args, **kwargs)
        except TypeError:
            return None     # a calling form the route does not read; PyTorch runs (and checks) it
        kernel, reason = self.choose(kernel_type, call)
        self.count(kernel or self.by_type[kernel_type][0], None if kernel else reason)
        return _launch(kernel, call) if kernel else None

    def run_module(self, route: ModuleRoute, original: Callable, args: tuple, kwargs: dict):
        """One call of a routed module: its checked (or first passing) variant, else its own forward."""
        if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor):
            return original(*args, **kwargs)
        x = args[0]
        fallback = None
        for variant in [route.checked] if route.checked else list(route.candidates):
            call = variant.make_call(x)
            kernel, reason = self.choose(variant.kernel_type, call)
            if kernel is None:
                fallback = fallback or (self.by_type[variant.kernel_type][0], reason)
                continue
            out = _launch(kernel, call) if route.checked else self._check_first_call(route, variant, kernel, call,
                                                                                     original, x)
            if out is not None:
                self.count(kernel)
                return out
        if fallback is not None:
            self.count(*fallback)
        return original(x)

    @torch.compiler.disable
    def _check_first_call(self, route: ModuleRoute, variant: routes.ModuleVariant, kernel: OptimizedKernel,
                          call: routes.Call, original: Callable, x: torch.Tensor):
        """The kernel's output if it matches the module's own forward on this call, else None (variant dropped)."""
        out = _launch(kernel, call)
        with torch._C.DisableTorchFunction():
            expected = original(x)
            error, allowed = output_error(expected, out), tolerance(expected)
        if error <= allowed:
            route.checked = variant
            return out
        route.candidates.remove(variant)
        route.rejections.append(f"{variant.label}: differs from the module's own forward by {error:.3g} "
                                f"(tolerance {allowed:g})")
        return None

    def summary(self) -> dict:
        """Hits, fallbacks and their reasons per kernel, and the module routes, as plain data."""
        return {
            "kernels": [{"name": k.name, "kernel_type": k.kernel_type, "file": str(k.file),
                         "hits": self.stats[k.name].hits, "fallbacks": self.stats[k.name].fallbacks,
                         "fallback_reasons": dict(self.stats[k.name].reasons.most_common())} for k in self.kernels],
            "module_routes": [{"path": r.path, "class": r.module_class,
                               "routed_as": r.checked.label if r.checked else None,
                               "candidates": [v.label for v in r.candidates], "rejections": r.rejections}
                              for r in self.module_routes],
        }


def _launch(kernel: OptimizedKernel, call: routes.Call) -> torch.Tensor:
    # A module route launches while the routing mode is on: the kernel's own torch calls must not be routed.
    with torch._C.DisableTorchFunction():
        return call.finish(kernel.launch(call.kernel_args()))


class _RoutingMode(TorchFunctionMode):
    """Sends the torch functions the router knows to it; PyTorch runs whatever it declines."""

    def __init__(self, router: Router):
        super().__init__()
        self.router = router

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = self.router.function_routes.get(func)
        if route is not None:
            out = self.router.run_function(*route, args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


# --------------------------------------------------------------------------- plugging in
def plug_in(model: nn.Module, optimized_dir: str | Path = paths.OPTIMIZED_DIR, *,
            include_slower: bool = False) -> nn.Module:
    """Route the model's calls to the kernels in optimized_dir, in place; returns the model.

    Kernels measured as slower than PyTorch at their job shapes stay out unless include_slower.

    The model keeps its class, parameters and attributes; only forward methods are patched (its
    own, and those of the modules a kernel replaces). Plugging in again replaces the earlier
    kernels; unplug(model) restores the original forwards.
    """
    unplug(model)
    router = Router(load_kernels(optimized_dir, include_slower=include_slower))
    verified_shapes = {kernel_type: [shape for kernel in kernels for shape in kernel.shapes]
                       for kernel_type, kernels in router.by_type.items()}
    for path, module in model.named_modules():
        variants = routes.module_variants(module, verified_shapes)
        if variants:
            route = ModuleRoute(path or "(model)", type(module).__name__, variants)
            router.module_routes.append(route)
            _patch(router, module, functools.partial(router.run_module, route))
    _patch(router, model, router.run_model)
    setattr(model, ROUTER_ATTRIBUTE, router)
    return model


def unplug(model: nn.Module) -> nn.Module:
    """Restore the forwards plug_in patched (a no-op for a model with nothing plugged in); returns the model."""
    router = router_of(model)
    if router is None:
        return model
    for module, previous in reversed(router.patches):
        if previous is _NOT_PATCHED:
            del module.forward
        else:
            module.forward = previous
    delattr(model, ROUTER_ATTRIBUTE)
    routes.forget_transposed_weights()
    return model


def router_of(model: nn.Module) -> Router | None:
    """The Router plugged into this model, or None."""
    return getattr(model, ROUTER_ATTRIBUTE, None)


def _patch(router: Router, module: nn.Module, run: Callable) -> None:
    """module.forward becomes run(its current forward, args, kwargs), keeping its signature for inspection."""
    original = module.forward
    router.patches.append((module, module.__dict__.get("forward", _NOT_PATCHED)))

    @functools.wraps(original)
    def forward(*args, **kwargs):
        return run(original, args, kwargs)
    module.forward = forward
