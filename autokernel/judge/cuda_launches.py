"""Which GPU kernels a CUDA kernel file's kernel_fn ran, and whether the judge accepts them.

A Triton kernel file proves it did its own work by launching a Triton kernel (worker_guards'
LaunchCounter). A CUDA kernel file's launches are invisible to Python, and the dispatch-mode guard
(NoLibraryCompute) sees only what goes through PyTorch's dispatcher: C++ can call cuBLAS directly.
So around every call of a CUDA file's kernel_fn, checked and timed, the worker records the GPU's
kernel events with the torch profiler (CUPTI), after a marker kernel of its own on the stream the
timer waits on. The call passes only if
  - at least one event is one of the file's own kernels: a `__global__` function of CUDA_SOURCE,
    read from the file's text by the judge (never from the module, which the candidate controls);
  - no event is a library's (cuBLAS, cuDNN, CUTLASS, nvjet, xmma ... anywhere in the demangled
    name, template arguments included: a kernel named like the file's own but instantiated by a
    library still carries the library's types) and none is foreign (neither the file's own nor
    PyTorch's at:: kernels, whose ops the dispatch-mode guard already polices: copies and fills);
  - every event ran on the marker's stream: work on a side stream is work the timer would not see.

Known limits: a C++ call that launches PyTorch's own compute kernels without the dispatcher (an
at::native stub called directly) passes as PyTorch's; and the profiler adds a little host time
to each launch, which makes a CUDA file's measured launch time slightly pessimistic, never kinder.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

MARKER_KERNEL = "_autokernel_stream_marker"
# Substrings (lower case) of a demangled kernel name that mark a library's kernel.
LIBRARY_MARKERS = ("cublas", "cudnn", "cutlass", "cute::", "nvjet", "xmma", "cusparse", "cufft", "curand", "cusolver",
                   "cub::", "thrust::", "magma", "flash::", "sm90_", "sm80_", "sm100_", "ampere_", "volta_", "turing_")
# Namespaces a kernel file may not put its own kernels in: PyTorch's and the libraries'.
PYTORCH_NAMESPACES = ("at", "c10", "torch")
RESERVED_NAMESPACES = (*PYTORCH_NAMESPACES, "cutlass", "cute", "cub", "thrust", "flash", "cublas", "cudnn")
_ANONYMOUS = "(anonymous namespace)::"


# --------------------------------------------------------------------------- the kernel file
def file_literals(source: str) -> dict:
    """BACKEND, CUDA_SOURCE, TUNABLES and TUNABLE_CHOICES where the file assigns them as literals
    (a value that is not a literal is left out, for the contract check to name)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in ("BACKEND", "CUDA_SOURCE", "TUNABLES",
                                                                  "TUNABLE_CHOICES"):
                    try:
                        found[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        found[target.id] = None
    return found


def is_cuda_file(source: str) -> bool:
    return file_literals(source).get("BACKEND") == "cuda"


def _uncommented(cuda_source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", cuda_source, flags=re.S)


def global_function_names(cuda_source: str) -> set[str]:
    """The names of the `__global__` functions CUDA_SOURCE defines (templates and launch bounds included)."""
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", _uncommented(cuda_source))
    return set(re.findall(r"__global__\b[^;{}()]*?\b([A-Za-z_]\w*)\s*\(", text))


def cuda_source_problem(cuda_source: str) -> str | None:
    """Why the judge could not tell this source's kernels from a library's, or None."""
    names = global_function_names(cuda_source)
    if not names:
        return "CUDA_SOURCE defines no __global__ function: the judge counts only CUDA_SOURCE's own kernels"
    library_like = sorted(n for n in names if library_marker(n) or n.startswith(MARKER_KERNEL))
    if library_like:
        return (f"CUDA_SOURCE names a kernel {library_like[0]!r} like a library's (or the judge's) kernel: "
                "rename it")
    reserved = re.search(rf"\bnamespace\s+({'|'.join(RESERVED_NAMESPACES)})\b", _uncommented(cuda_source))
    if reserved:
        return (f"CUDA_SOURCE opens namespace {reserved.group(1)}, which belongs to PyTorch or a library: "
                "put your kernels in your own namespace (or none)")
    return None


# --------------------------------------------------------------------------- kernel events
def library_marker(name: str) -> str | None:
    lowered = name.lower()
    return next((marker for marker in LIBRARY_MARKERS if marker in lowered), None)


def _mangled_qualified_name(mangled: str) -> str:
    """`_ZN12_GLOBAL__N_16kernelIfEEvPT_` -> `kernel`: the nested name's identifiers (Itanium ABI), for a
    profiler that reports kernels undemangled; anonymous namespaces dropped."""
    rest = mangled[2:]
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    parts = []
    while rest[:1].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        length = int(rest[:digits])
        parts.append(rest[digits:digits + length])
        rest = rest[digits + length:]
        if not nested:
            break
    return "::".join(part for part in parts if not part.startswith("_GLOBAL__N"))


def qualified_name(demangled: str) -> str:
    """`void ns::kernel<int, 4>(float*, long)` -> `ns::kernel`; anonymous namespaces dropped."""
    if demangled.startswith("_Z"):
        return _mangled_qualified_name(demangled)
    name = demangled.replace(_ANONYMOUS, "").strip()
    if name.startswith("void "):
        name = name[len("void "):]
    depth = 0
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == "(" and depth == 0:
            name = name[:index]
            break
    if "<" in name:
        name = name[:name.index("<")]
    return name.strip()


def kind_of(demangled: str, own: set[str]) -> str:
    """'library', 'pytorch', 'own' or 'foreign' for one kernel event's (demangled) name."""
    if library_marker(demangled):
        return "library"
    qualified = qualified_name(demangled)
    parts = qualified.split("::")
    if parts[0] in PYTORCH_NAMESPACES:
        return "pytorch"
    if parts[-1] in own and not any(p in RESERVED_NAMESPACES for p in parts[:-1]):
        return "own"
    return "foreign"


@dataclass
class KernelEvent:
    name: str
    stream: int


@dataclass
class LaunchVerdict:
    own: int = 0
    problem: str | None = None
    kinds: dict[str, list[str]] = field(default_factory=dict)


def _short(name: str, limit: int = 120) -> str:
    return name if len(name) <= limit else name[:limit] + "..."


def judge_launches(events: list[KernelEvent], own: set[str]) -> LaunchVerdict:
    """The verdict on one call's kernel events, in launch order, the worker's marker among them."""
    # (startswith: a Triton version that suffixes a kernel's name still names it; no own kernel may start so)
    markers = [e for e in events if qualified_name(e.name).startswith(MARKER_KERNEL)]
    if len(markers) != 1:
        return LaunchVerdict(problem=f"the judge saw {len(markers)} stream markers around kernel_fn, expected 1: "
                                     "the GPU's kernel events cannot be trusted for this call")
    timer_stream = markers[0].stream
    verdict = LaunchVerdict()
    for event in events:
        if event is markers[0]:
            continue
        kind = kind_of(event.name, own)
        verdict.kinds.setdefault(kind, []).append(event.name)
        if verdict.problem:
            continue
        if kind == "library":
            verdict.problem = (f"kernel_fn ran the library kernel {_short(event.name)} ({library_marker(event.name)}): "
                               "the result must come from CUDA_SOURCE's own kernels")
        elif kind == "foreign":
            verdict.problem = (f"kernel_fn ran the kernel {_short(event.name)}, which is neither one of CUDA_SOURCE's "
                               f"__global__ functions ({', '.join(sorted(own))}) nor a PyTorch copy")
        elif event.stream != timer_stream:
            verdict.problem = (f"kernel_fn ran {_short(event.name)} on a side stream: launch on "
                               "at::cuda::getCurrentCUDAStream(), the stream the timer waits for")
        elif kind == "own":
            verdict.own += 1
    if verdict.problem is None and verdict.own == 0:
        verdict.problem = (f"kernel_fn launched none of CUDA_SOURCE's kernels ({', '.join(sorted(own))}): it must "
                           "compute the result with its own kernels")
    return verdict


def is_kernel_event(event) -> bool:
    """Whether a profiler (kineto) event is a GPU kernel: a device-side event that is not a copy or a fill.

    torch 2.11's _KinetoEvent has no activity_type(); its device events are kernels, "Memcpy ..." and
    "Memset ..." (the GPU image's profiler, H100), told apart here by device type and name.
    """
    import torch

    if hasattr(event, "activity_type"):
        return event.activity_type() == "kernel"
    return (event.device_type() == torch.autograd.DeviceType.CUDA
            and not event.name().startswith(("Memcpy", "Memset")))


# --------------------------------------------------------------------------- in the worker (needs a GPU)
class LaunchWatch:
    """Records the GPU kernel events of one call of kernel_fn (torch profiler, CUPTI) and judges them.

    Created by the worker before it imports the kernel file, from the file's text. `watch()` wraps a
    call: it starts the profiler, launches the judge's marker kernel on the current stream (the
    timer's), lets the call run, waits for the whole device, and leaves its verdict in `verdict`.
    """

    def __init__(self, own: set[str], device, source_problem: str | None = None):
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.own = set(own)
        self.device = device
        self.source_problem = source_problem
        # Bound now, before the kernel file is imported: later replacements do not reach this watch.
        self._profile, self._activities, self._sync = profile, [ProfilerActivity.CUDA], torch.cuda.synchronize
        from autokernel.judge.stream_marker import _autokernel_stream_marker

        self._marker = _autokernel_stream_marker
        self.marker_target = torch.zeros(1, device=device)
        self.verdict: LaunchVerdict | None = None
        self._marker[(1,)](self.marker_target)          # compiled now, not inside a timed call
        self._sync(device)

    def watch(self):
        import contextlib

        @contextlib.contextmanager
        def watching():
            self.verdict = None
            with self._profile(activities=self._activities) as prof:
                self._marker[(1,)](self.marker_target)
                yield
                self._sync(self.device)                 # the whole device: side streams too
            events = [e for e in prof.profiler.kineto_results.events() if is_kernel_event(e)]
            events.sort(key=lambda e: e.start_ns())
            self.verdict = (LaunchVerdict(problem=self.source_problem) if self.source_problem else
                            judge_launches([KernelEvent(e.name(), e.device_resource_id()) for e in events], self.own))
        return watching()

    def problem(self) -> str | None:
        if self.verdict is None:
            return "the judge could not record the GPU kernels kernel_fn ran"
        return self.verdict.problem


def watch_for(kernel_path, device) -> LaunchWatch | None:
    """A LaunchWatch for a CUDA kernel file (BACKEND = "cuda") judged on a GPU, else None.

    The own kernels' names come from the file's text, read before it is imported.
    """
    from pathlib import Path

    if device.type != "cuda":
        return None
    try:
        literals = file_literals(Path(kernel_path).read_text())
    except (OSError, UnicodeDecodeError):
        return None
    if literals.get("BACKEND") != "cuda":
        return None
    cuda_source = literals.get("CUDA_SOURCE")
    if not isinstance(cuda_source, str):
        return LaunchWatch(set(), device, "CUDA_SOURCE must be assigned once, as a string literal")
    return LaunchWatch(global_function_names(cuda_source), device, cuda_source_problem(cuda_source))
