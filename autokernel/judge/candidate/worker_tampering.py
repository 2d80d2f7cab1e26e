"""What the kernel file may not change in the candidate's process: the worker's own objects and torch's globals.

Part of the checks inside the candidate's process (autokernel/judge/candidate/worker_guards.py has the others):
- Fingerprint notices when the kernel file replaces a function the worker's measurements rely on
  (the timer, the socket, the JSON encoder, builtins, torch's event class ...);
- global_state notices changes to torch's global settings (TF32, deterministic flags, allocator
  settings, thread counts ...), which would leak into the user's model;
- refuse_introspection is an audit hook (it cannot be removed once added) that refuses the tools
  for reaching into the worker's own objects: gc.get_objects/get_referrers/get_referents,
  sys.settrace/setprofile and rewriting a function's __code__.
"""

from __future__ import annotations

import os
import re
import sys
import types

import torch

from autokernel.judge.candidate.worker_guards import VIOLATIONS

# The tools for reaching into the worker's own objects; no kernel needs them.
REFUSED_AUDIT_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace",
                                  "sys.setprofile"})

# --------------------------------------------------------------------------- tampering
_MISSING = object()


def _identity(value):
    """What must stay the same for a watched attribute: the object, and a function's defaults and cells.

    (Its __code__ cannot change: the audit hook refuses the assignment, and reading it would call
    the hook on every check.)
    """
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        cells = tuple(c.cell_contents if _cell_full(c) else None for c in (value.__closure__ or ()))
        return (value, value.__defaults__, value.__kwdefaults__, *cells)
    return (value,)


def _static_attribute(obj, name: str):
    """obj.name as stored (no descriptor or bound method), or _MISSING."""
    for owner in (obj.__mro__ if isinstance(obj, type) else (obj,)):
        found = vars(owner).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class Fingerprint:
    """The attributes of watched objects, to find out later whether any was replaced.

    `watched` maps a label (what the message calls it) to a module, class or instance, or to a
    pair (object, names) to watch only those attributes (for modules that legitimately change their
    other globals, like torch.cuda while it initializes). For builtins only replacements and
    deletions count; elsewhere an added attribute counts too, since a new module global can shadow
    a builtin the worker's code uses.
    """

    def __init__(self, watched: dict[str, object] | None = None):
        self.watched: dict = {}
        self.snapshot: dict = {}
        if watched:
            self.take(watched)

    def take(self, watched: dict[str, object]) -> None:
        self.watched = dict(watched)
        self.snapshot = {label: self._attributes(target) for label, target in self.watched.items()}

    @staticmethod
    def _attributes(target) -> dict:
        if isinstance(target, tuple):
            obj, names = target
            found = {name: _static_attribute(obj, name) for name in names}
            return {name: _identity(value) for name, value in found.items() if value is not _MISSING}
        return {name: _identity(value) for name, value in list(vars(target).items())}

    def changes(self) -> list[str]:
        found = []
        for label, target in self.watched.items():
            before, now = self.snapshot[label], self._attributes(target)
            for name, ident in before.items():
                if name not in now:
                    found.append(f"deleted {label}.{name}")
                elif not _same(ident, now[name]):
                    found.append(f"replaced {label}.{name}")
            if label != "builtins" and not isinstance(target, tuple):
                found += [f"added {label}.{name}" for name in now if name not in before and not name.startswith("__")]
        return found


# Another process's entries under /proc that would reach into it: its descriptors (the judge's verdict pipe,
# once), its memory and environment, its command line (a verdict's path, once). The kernel's own stay open.
_OTHER_PROCESS_ENTRY = re.compile(r"^/proc/(\d+)/(?:task/\d+/)?(fd|fdinfo|mem|environ|cmdline|map_files)(?:/|$)")


def refuse_introspection(event: str, args: tuple) -> None:
    """Audit hook: refuse the tools for reaching into the worker's objects or other processes, and note the attempt."""
    refused = event in REFUSED_AUDIT_EVENTS or (event == "object.__setattr__" and len(args) > 1
                                                 and args[1] == "__code__")
    if refused:
        message = f"the kernel called {event if event != 'object.__setattr__' else 'setattr(fn, __code__)'}: " \
                  "a kernel may not inspect or rewrite the judge's objects"
        VIOLATIONS.note(message)
        raise PermissionError(message)
    if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        path = os.path.normpath(os.fsdecode(args[0]))
        entry = _OTHER_PROCESS_ENTRY.match(path)
        if entry and int(entry.group(1)) != os.getpid():
            message = (f"the kernel opened {path}, another process's {entry.group(2)}: a kernel may not reach into "
                       "the judge or any other process")
            VIOLATIONS.note(message)
            raise PermissionError(message)


# --------------------------------------------------------------------------- global state
def _try(getter):
    try:
        return getter()
    except Exception:  # an API this torch version does not have
        return None


GLOBAL_STATE_GETTERS = {
    "torch.get_float32_matmul_precision()": lambda: torch.get_float32_matmul_precision(),
    "torch.backends.cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    "torch.backends.cudnn.enabled": lambda: torch.backends.cudnn.enabled,
    "torch.backends.cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "torch.backends.cudnn.benchmark": lambda: torch.backends.cudnn.benchmark,
    "torch.backends.cudnn.deterministic": lambda: torch.backends.cudnn.deterministic,
    "torch.are_deterministic_algorithms_enabled()": lambda: torch.are_deterministic_algorithms_enabled(),
    "torch.is_deterministic_algorithms_warn_only_enabled()":
        lambda: torch.is_deterministic_algorithms_warn_only_enabled(),
    "torch.utils.deterministic.fill_uninitialized_memory":
        lambda: __import__("torch.utils.deterministic").utils.deterministic.fill_uninitialized_memory,
    "torch.get_default_dtype()": lambda: torch.get_default_dtype(),
    "torch.is_grad_enabled()": lambda: torch.is_grad_enabled(),
    "torch.is_inference_mode_enabled()": lambda: torch.is_inference_mode_enabled(),
    "torch.is_anomaly_enabled()": lambda: torch.is_anomaly_enabled(),
    "torch.get_num_threads()": lambda: torch.get_num_threads(),
    "torch.get_num_interop_threads()": lambda: torch.get_num_interop_threads(),
    "torch.backends.cuda.flash_sdp_enabled()": lambda: torch.backends.cuda.flash_sdp_enabled(),
    "torch.backends.cuda.mem_efficient_sdp_enabled()": lambda: torch.backends.cuda.mem_efficient_sdp_enabled(),
    "torch.backends.cuda.math_sdp_enabled()": lambda: torch.backends.cuda.math_sdp_enabled(),
    "allocator settings": lambda: torch._C._accelerator_getAllocatorSettings(),
    "torch.cuda memory fraction": lambda: torch.cuda.get_per_process_memory_fraction()
    if torch.cuda.is_available() else None,
    "torch function modes": lambda: torch._C._len_torch_function_stack(),
    "torch dispatch modes": lambda: torch._C._len_torch_dispatch_stack(),
    "sys.gettrace()": lambda: sys.gettrace(),
    "sys.getprofile()": lambda: sys.getprofile(),
    "threads": lambda: len(sys._current_frames()),
}
# Environment variables that change numerics, memory or devices (caches and logging do not count).
STATE_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
             "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE", "CUBLAS_WORKSPACE_CONFIG",
             "CUDA_LAUNCH_BLOCKING", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "TRITON_F32_DEFAULT",
             "TRITON_DEFAULT_FP_FUSION")


def global_state() -> dict:
    state = {name: _try(getter) for name, getter in GLOBAL_STATE_GETTERS.items()}
    state.update({f"${name}": os.environ.get(name) for name in STATE_ENV})
    return state


def state_changes(before: dict, after: dict) -> list[str]:
    """What differs, as 'name before -> after' (threads are reported separately by the caller)."""
    names = sorted(set(before) | set(after))
    return [f"{name} {before.get(name)!r} -> {after.get(name)!r}" for name in names
            if before.get(name) != after.get(name)]
