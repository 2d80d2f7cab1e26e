"""The checks that run inside the candidate's process, around every call of kernel_fn.

The worker (autokernel/judge/candidate/worker.py) installs all of these before it imports the kernel file, so
they are bound to the real torch, Triton and Python objects:

- NoLibraryCompute refuses PyTorch compute ops while kernel_fn runs: only allocation, views,
  copies and dtype conversion are allowed (and, when the kernel runs on a GPU, host-side work on
  CPU tensors, such as Triton's autotuner taking the median of its timings);
- NoThreads refuses Python threads started inside kernel_fn (dispatch modes are per thread);
- LaunchCounter counts the Triton launches kernel_fn makes itself, and notes launches onto a
  stream other than the one the timer waits on;
- poisoned_allocations fills fresh allocations with NaN during checked calls;
- the tampering checks (autokernel/judge/candidate/worker_tampering.py): Fingerprint, global_state and the
  refuse_introspection audit hook;
- output_problem checks that what kernel_fn returned is a plain tensor (or, where the reference returns
  a tuple, a tuple of them), none of them the previous call's.

None of this can stop code that rewrites the process's memory (ctypes): that is why the verdict
is taken in another process (the judge, autokernel/judge/bench.py), which checks every output itself. docs/threats.md
lists what remains.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# Ops that create a tensor without reading another one's values.
CREATION_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange",
    "lift_fresh", "lift_fresh_copy", "fill_", "zero_"})
# Ops that move or convert values without computing on them, or only change a tensor's metadata.
COPY_OPS = frozenset({
    "copy_", "clone", "_to_copy", "_copy_from", "_copy_from_and_resize", "contiguous", "_unsafe_view", "set_",
    "resize_", "_pin_memory", "record_stream", "_local_scalar_dense", "detach_", "squeeze_", "unsqueeze_",
    "transpose_", "t_", "as_strided_", "swapdims_", "swapaxes_"})


class Violations:
    """What the kernel did that it may not: the first thing noted is what the judge reports."""

    def __init__(self):
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def first(self) -> str | None:
        return self.notes[0] if self.notes else None

    def clear(self) -> None:
        self.notes.clear()


VIOLATIONS = Violations()


class LibraryCompute(RuntimeError):
    """Raised inside kernel_fn when it calls a PyTorch compute op."""


_ALLOWED_OPS: dict = {}      # op -> allowed by kind, decided once (timed calls pay for every lookup)


def _allowed_kind(func) -> bool:
    allowed = _ALLOWED_OPS.get(func)
    if allowed is None:
        name = func._schema.name.split("::", 1)[-1]
        allowed = _ALLOWED_OPS[func] = name in CREATION_OPS or name in COPY_OPS or bool(getattr(func, "is_view", False))
    return allowed


def _host_only(args, kwargs) -> bool:
    """Every tensor argument is on the CPU: on a GPU that is bookkeeping (an autotuner's statistics)."""
    return all(t.device.type == "cpu" for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))


class NoLibraryCompute(TorchDispatchMode):
    """Refuse PyTorch compute ops while kernel_fn runs; allocation, views and copies pass through.

    The refusal is noted in VIOLATIONS as well as raised, so a kernel_fn that catches the error
    still fails. Ops issued while the current stream is not the timer's are refused too: work on a
    side stream is work the timer would not see.
    """

    def __init__(self, device_type: str, stream_of=None, timing_stream=None):
        super().__init__()
        self.device_type = device_type
        self.stream_of = stream_of
        self.timing_stream = timing_stream
        self.ops = 0            # ops seen: the host time this guard adds to a call is counted per op

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        self.ops += 1
        kwargs = kwargs or {}
        if not _allowed_kind(func) and (self.device_type == "cpu" or not _host_only(args, kwargs)):
            message = (f"kernel_fn called {func._schema.name}: the result must come from your own kernels "
                       "(inside kernel_fn, PyTorch may only allocate, view, copy and convert tensors)")
            VIOLATIONS.note(message)
            raise LibraryCompute(message)
        if self.stream_of is not None and self.stream_of() != self.timing_stream:
            message = (f"kernel_fn ran {func._schema.name} on a side stream: use torch.cuda.current_stream(), "
                       "the stream the timer waits for")
            VIOLATIONS.note(message)
            raise LibraryCompute(message)
        return func(*args, **kwargs)


class NoThreads:
    """Refuse Python threads started while kernel_fn runs (and note it, as NoLibraryCompute does).

    PyTorch keeps dispatch modes per thread: a thread of kernel_fn's own would run PyTorch's ops where
    NoLibraryCompute never sees them, and one joined before kernel_fn returns leaves no thread behind. Every
    Python thread starts through _thread.start_new_thread (threading keeps its own name for it): both are
    replaced, and the worker's fingerprint watches the replacements.
    """

    def __init__(self):
        self.active = False

    def install(self) -> "NoThreads":
        import _thread
        import threading

        original, guard = _thread.start_new_thread, self

        def start_new_thread(*args, **kwargs):
            if guard.active:
                message = ("kernel_fn started a thread: PyTorch's guard is per thread, so a kernel's work must run "
                           "in kernel_fn's own thread (and its own kernels)")
                VIOLATIONS.note(message)
                raise LibraryCompute(message)
            return original(*args, **kwargs)
        self._originals = (original, threading._start_new_thread)
        _thread.start_new_thread = threading._start_new_thread = start_new_thread
        return self

    def uninstall(self) -> None:
        import _thread
        import threading

        _thread.start_new_thread, threading._start_new_thread = self._originals

    def __enter__(self):
        self.active = True

    def __exit__(self, *exc):
        self.active = False


def compiled_figures(kernel) -> dict | None:
    """What the compiler made of a launched Triton kernel (registers per thread, spills, shared memory,
    warps, stages), or None where there is none (the interpreter compiles nothing)."""
    try:
        metadata = getattr(kernel, "metadata", None)
        figures = {"registers": getattr(kernel, "n_regs", None), "spills": getattr(kernel, "n_spills", None),
                   "shared_bytes": getattr(metadata, "shared", None), "num_warps": getattr(metadata, "num_warps", None),
                   "num_stages": getattr(metadata, "num_stages", None)}
    except Exception:   # a Triton version without these: the figures are a hint for the agent, not a check
        return None
    figures = {key: int(value) for key, value in figures.items() if isinstance(value, int)}
    return figures or None


class LaunchCounter:
    """Counts Triton kernel launches by wrapping JITFunction.run (and the interpreter's run).

    Kernels compiled by torch.compile (Inductor) do not go through these entry points, so wrapping
    the reference in torch.compile does not count as launching a kernel of one's own. A launch made
    while the current stream is not the timer's stream is noted as a violation.
    """

    def __init__(self, stream_of=None, timing_stream=None):
        self.count = 0
        self.stream_of = stream_of
        self.timing_stream = timing_stream
        self._originals = []
        self.wrappers = {}
        self.compiled: dict[str, dict] = {}    # kernel name -> compiled_figures of its latest launch
        self.grids: dict[str, list[int]] = {}  # kernel name -> the grid of its latest launch (x, y, z)
        self._last_kernel: dict[str, object] = {}

    def install(self) -> "LaunchCounter":
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for cls in (JITFunction, InterpretedFunction):
            original = cls.run
            self._originals.append((cls, original))
            cls.run = self.wrappers[cls] = self._counting(original)
        return self

    def _counting(self, original):
        counter = self

        def run(fn_self, *args, **kwargs):
            name = getattr(fn_self, "__name__", "kernel")
            if not kwargs.get("warmup", False):      # warmup compiles without launching
                counter.count += 1
                if counter.stream_of is not None and counter.stream_of() != counter.timing_stream:
                    VIOLATIONS.note("kernel_fn launched a Triton kernel on a side stream: launch on "
                                    "torch.cuda.current_stream(), the stream the timer waits for")
                kwargs["grid"] = counter._noting_grid(name, kwargs.get("grid"))
            kernel = original(fn_self, *args, **kwargs)
            if counter._last_kernel.get(name) is not kernel:    # a new compilation (shape, config): read it once
                counter._last_kernel[name] = kernel
                figures = compiled_figures(kernel)
                if figures is not None:
                    counter.compiled[name] = figures
            return kernel
        return run

    def _noting_grid(self, name: str, grid):
        """The launch's grid, unchanged, noting its size once Triton has it: a callable grid is resolved by
        Triton from the launch's arguments, so it is wrapped to note what it returns."""
        if not callable(grid):
            self._note_grid(name, grid)
            return grid
        counter = self

        def resolved(meta):
            launched = grid(meta)
            counter._note_grid(name, launched)
            return launched
        return resolved

    def _note_grid(self, name: str, grid) -> None:
        try:
            sizes = [int(size) for size in tuple(grid)[:3]]
        except (TypeError, ValueError):     # not a grid Triton would launch: its own error says so
            return
        self.grids[name] = sizes + [1] * (3 - len(sizes))

    def report(self) -> dict[str, dict]:
        """Per launched kernel: its compiled figures (none under the interpreter) and the grid of its latest launch."""
        return {name: {**self.compiled.get(name, {}), **({"grid": self.grids[name]} if name in self.grids else {})}
                for name in {**self.compiled, **self.grids}}

    def uninstall(self) -> None:
        for cls, original in self._originals:
            cls.run = original
        self._originals.clear()


@contextlib.contextmanager
def poisoned_allocations():
    """Make torch.empty & co. return NaN-filled (float) or max-valued (int) memory."""
    import torch.utils.deterministic as det

    was_det, was_warn, was_fill = (torch.are_deterministic_algorithms_enabled(),
                                   torch.is_deterministic_algorithms_warn_only_enabled(),
                                   det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            # Deterministic mode only warns about ops without a deterministic variant; that is stage 4's job.
            warnings.simplefilter("ignore")
            yield
    finally:
        det.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_det, warn_only=was_warn)


# --------------------------------------------------------------------------- outputs
def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    a_start = a.untyped_storage().data_ptr()
    b_start = b.untyped_storage().data_ptr()
    return a_start < b_start + b.untyped_storage().nbytes() and b_start < a_start + a.untyped_storage().nbytes()


def output_tensors(output, parts: int) -> tuple:
    """kernel_fn's return value as its tensors: itself where the reference returns one tensor (parts 1), else the
    tuple's (torch.max(x, dim)'s values and indices)."""
    return (output,) if parts == 1 else tuple(output)


def output_problem(output, inputs: dict, previous: tuple | None, device: torch.device,
                   parts: int = 1) -> str | None:
    """Why kernel_fn's return value is not `parts` plain, fresh tensors of its own, or None if it is: one
    tensor when parts is 1, else a tuple (or list) of that many. previous: the last call's output tensors."""
    if parts != 1 and not (isinstance(output, (tuple, list)) and len(output) == parts):
        size = f" of {len(output)}" if isinstance(output, (tuple, list)) else ""
        return f"kernel_fn returned {type(output).__name__}{size}, expected a tuple of {parts} tensors as the " \
               "reference returns"
    tensors = output_tensors(output, parts)
    for tensor in tensors:
        problem = _tensor_problem(tensor, inputs, previous or (), device)
        if problem:
            return problem
    if any(overlaps(a, b) for i, a in enumerate(tensors) for b in tensors[i + 1:]):
        return "kernel_fn's output tensors share memory with each other; return a fresh tensor for each"
    return None


def _tensor_problem(output, inputs: dict, previous: tuple, device: torch.device) -> str | None:
    if not isinstance(output, torch.Tensor):
        return f"kernel_fn returned {type(output).__name__}, expected a torch.Tensor"
    if type(output) is not torch.Tensor:
        return (f"kernel_fn returned a {type(output).__name__}, a subclass of torch.Tensor: return a plain "
                "torch.Tensor holding the computed values")
    if output.layout != torch.strided or output._is_zerotensor() or output.is_neg() or output.is_conj():
        return "kernel_fn returned a lazy tensor (sparse, zero, negative or conjugate view): return computed values"
    if output.device != device:
        return f"kernel_fn returned a tensor on {output.device}, expected {device}"
    for name, tensor in inputs.items():
        if isinstance(tensor, torch.Tensor) and overlaps(output, tensor):
            return f"kernel_fn's output shares memory with its input {name!r}; return a fresh tensor"
    if output.numel() and any(overlaps(output, earlier) for earlier in previous):
        return ("kernel_fn returned the same output buffer as on its previous call; each call must return a "
                "fresh tensor")
    return None


def guard_cost_ms(mode: NoLibraryCompute, device: torch.device, perf) -> tuple[float, float]:
    """What `mode` itself costs the host, in ms: once per call (entering and leaving it) and per op.

    A Python dispatch mode adds tens of microseconds to every op (measured: ~30 us on a CPU
    runner), which a model never pays. The launch time the judge compares with PyTorch's is the
    host time of a guarded call less this cost. Measured before the kernel file is imported, so
    the candidate cannot inflate it; the best of a few rounds, as a cost is a lower bound.
    """
    probe = torch.empty(0, device=device)
    rounds, calls = 5, 100

    def best_of(body) -> float:
        times = []
        for _ in range(rounds):
            started = perf()
            body()
            times.append((perf() - started) * 1e3 / calls)
        return min(times)

    def ops_plain():
        for _ in range(calls):
            probe.view(-1)

    def ops_guarded():
        with mode:
            for _ in range(calls):
                probe.view(-1)

    def enter_and_leave():
        for _ in range(calls):
            with mode:
                pass

    per_op = max(0.0, best_of(ops_guarded) - best_of(ops_plain))
    per_call = best_of(enter_and_leave)
    mode.ops = 0
    return per_call, per_op
