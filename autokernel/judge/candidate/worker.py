"""The candidate's process: it imports the kernel file and runs kernel_fn when the judge asks.

bench.py (the judge) starts this worker with one end of a socket pair and keeps the verdict to itself: it makes its
own copy of every input, computes the reference, and compares what the worker sends back. The worker only computes
outputs and timings. Before it imports the kernel file it binds the timer (autokernel/judge/timing.py's Clock) and
installs its guards (worker_guards.py); after the import and after every call it checks that none of them was
replaced and that torch's global state did not change.

Requests (JSON, autokernel/core/wire.py) and replies:
  call        {"case", "repeat", "poison", "parts"}
                                           -> the outputs of `repeat` checked calls on the case's inputs,
                                              each as its `parts` tensors (a tuple's, where parts > 1)
  time_begin  {"case", "parts"}            -> builds the inputs the timed calls reuse
  iterate     {"seed", "pad_cycles", "empty"}
                                           -> writes fresh inputs (from the seed, which the judge drew at
                                              random just now) into the same tensors, sends {"started"}, makes
                                              one timed call (of nothing, where empty), sends {"idle"} as soon
                                              as the device is idle, replies the record; then the judge at once:
  proof       {"positions"}                -> the output's elements at those flat positions (the judge's clock
                                              stops on this reply), then, off the judge's clock, the checks of
                                              the call and {"checked": true}
  output      {}  /  sample {"positions"}  -> the last timed call's output, or its elements at those positions
  exit        {}
A reply that is {"fail": message} or {"crash": message} ends the judging.
"""

from __future__ import annotations

import _thread
import argparse
import builtins
import contextlib
import hashlib
import json
import os
import socket
import sys
import threading
import time
import weakref
from pathlib import Path

import torch
import triton
import triton.testing
import triton.runtime.interpreter
import triton.runtime.jit
import torch.utils._python_dispatch

from autokernel.core import wire
from autokernel.core.kernel_file import import_file
from autokernel.judge import correctness, cuda_launches, timing
from autokernel.judge.candidate import kernel_errors, worker_guards as guards, worker_tampering as tampering
from autokernel.judge.candidate.kernel_errors import crash_message
from autokernel.judge.candidate.worker_guards import VIOLATIONS
from autokernel.judge.candidate.worker_process import die_with_parent
from autokernel.kernel_types import references as reference, registry
from autokernel.kernel_types.base import KernelType


class Rejected(Exception):
    """kernel_fn did something the judge does not allow; the message says what."""


def load_kernel(path: Path):
    """Import a kernel file; returns (module, its registry entry). Only the worker does this for the judge."""
    module = import_file(path, f"autokernel_candidate_{path.stem}")
    kernel_type = getattr(module, "KERNEL_TYPE", None)
    if kernel_type is None:
        raise ValueError(f"{path} defines no KERNEL_TYPE (one of: {', '.join(registry.REGISTRY)})")
    if not callable(getattr(module, "kernel_fn", None)):
        raise ValueError(f"{path} defines no kernel_fn")
    return module, registry.get(kernel_type)


def _threads() -> int:
    return len(sys._current_frames())


def _empty_call():
    return None


def _classes_of(module) -> dict:
    return {f"{module.__name__}.{name}": value for name, value in vars(module).items()
            if isinstance(value, type) and value.__module__ == module.__name__}


class Worker:
    def __init__(self, sock: socket.socket, kernel_path: Path, device: torch.device, source_digest: str | None = None):
        self.sock = sock
        self.kernel_path = kernel_path
        self.source_digest = source_digest      # the sha256 of the source the judge's source check passed
        self.device = device
        self.clock = timing.Clock(device)
        stream_of = timing_stream = None
        if device.type == "cuda":
            get_stream, index = torch._C._cuda_getCurrentRawStream, device.index or 0
            stream_of, timing_stream = (lambda: get_stream(index)), self.clock.stream.cuda_stream
        self.no_library_compute = guards.NoLibraryCompute(device.type, stream_of, timing_stream)
        self.guard_per_call_ms, self.guard_per_op_ms = guards.guard_cost_ms(self.no_library_compute, device,
                                                                            self.clock.perf)
        self.no_threads = guards.NoThreads().install()
        self.counter = guards.LaunchCounter(stream_of, timing_stream).install()
        # A CUDA kernel file's launches are read from the GPU's kernel events (autokernel/judge/cuda_launches.py).
        self.cuda_watch = cuda_launches.watch_for(kernel_path, device)
        self.kt: KernelType | None = None
        self.kernel_fn = None
        self.previous_output = None         # the tensors of the last call's output
        self.earlier_outputs: list = []     # weak references to every earlier call's output tensors
        self.timed_case = self.timed_inputs = self.last_output = self.witness = self.unproven = None
        self.timed_parts = 1
        self.state = tampering.global_state()
        self.fingerprint = tampering.Fingerprint()     # exists before the snapshot, which includes it
        self.fingerprint.take(self._watched())
        sys.addaudithook(tampering.refuse_introspection)

    def _watched(self) -> dict:
        """Everything the worker's measurements and replies rely on, as the kernel file must leave it."""
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        modules = [sys.modules[__name__], guards, tampering, timing, wire, correctness, registry, reference,
                   cuda_launches, kernel_errors]
        watched = {m.__name__: m for m in modules}
        for module in modules:
            watched.update(_classes_of(module))
        watched.update({
            "builtins": builtins, "the worker's clock": self.clock, "the worker": self,
            "time": (time, ("perf_counter", "monotonic", "time", "sleep")),
            "os": (os, ("write", "read", "getpid", "getppid", "environ", "_exit")),
            "json": (json, ("dumps", "loads", "JSONEncoder", "_default_encoder")), "json.encoder": json.encoder,
            "_thread": (_thread, ("start_new_thread",)), "threading": (threading, ("_start_new_thread",)),
            "json.JSONEncoder": json.JSONEncoder,
            "socket.socket": (socket.socket, ("sendall", "send", "recv", "recv_into", "fileno")),
            "torch.cuda": (torch.cuda, ("synchronize", "current_stream", "Event", "Stream", "stream", "set_stream")),
            "torch.cuda.Event": torch.cuda.Event,
            "torch.Tensor": (torch.Tensor, ("copy_", "clone", "contiguous", "cpu", "reshape", "view", "numpy",
                                            "detach", "untyped_storage", "data_ptr", "__torch_function__",
                                            "__torch_dispatch__")),
            "torch.utils._python_dispatch": (torch.utils._python_dispatch, ("_push_mode", "_pop_mode",
                                                                            "_get_current_dispatch_mode")),
            "TorchDispatchMode": torch.utils._python_dispatch.TorchDispatchMode,
            "triton.testing": (triton.testing, ("do_bench", "do_bench_cudagraph")),
            "JITFunction": (JITFunction, ("run", "__call__", "__getitem__", "warmup")),
            "InterpretedFunction": (InterpretedFunction, ("run", "__call__", "__getitem__", "warmup"))})
        watched.update({f"registry entry {name}": kt for name, kt in registry.REGISTRY.items()})
        if self.cuda_watch is not None:
            watched.update({"torch.profiler.profile": torch.profiler.profile,
                            "_KinetoEvent": (torch._C._autograd._KinetoEvent,
                                             ("name", "activity_type", "device_resource_id", "start_ns"))})
        return watched

    # ------------------------------------------------------------------ checks around every call
    def _tampering(self, fingerprint: bool = True) -> str | None:
        """Replaced attributes (a few ms to check, so timed calls leave it to the next other request),
        changed global state, threads left running."""
        changes = [c for c in self.fingerprint.changes() if not c.endswith(self._mutable_attributes)] \
            if fingerprint else []
        if changes:
            return (f"the kernel {', '.join(changes[:5])}: a kernel may not replace what the judge's worker "
                    "relies on (its timer, checks or channel)")
        changed = tampering.state_changes(self.state, tampering.global_state())
        threads = [c for c in changed if c.startswith("threads ")]
        if threads:
            return f"the kernel left a thread running ({threads[0]}): everything must finish before kernel_fn returns"
        if changed:
            return (f"the kernel changed torch's global state: {'; '.join(changed[:3])}; a kernel must not change "
                    "settings the user's model depends on")
        return None

    # The worker's own bookkeeping, which changes from call to call.
    _mutable_attributes = tuple(f"the worker.{name}" for name in (
        "kt", "kernel_fn", "previous_output", "earlier_outputs", "timed_case", "timed_inputs", "last_output", "witness",
        "timed_parts", "unproven"))

    def _run_kernel(self, **inputs):
        with self.no_library_compute, self.no_threads:
            return self.kernel_fn(**inputs)

    def _watching(self):
        return self.cuda_watch.watch() if self.cuda_watch is not None else contextlib.nullcontext()

    def _after_call(self, output, inputs: dict, launches_before: int, parts: int,
                    timed: bool = False) -> tuple[torch.Tensor, ...]:
        """The output's tensors, once the call is found to have broken no rule."""
        problem = (VIOLATIONS.first() or (self.cuda_watch.problem() if self.cuda_watch is not None else None)
                   or guards.output_problem(output, inputs, self.previous_output, self.device, parts))
        if problem is None and self.cuda_watch is None and self.counter.count == launches_before:
            problem = ("kernel_fn launched no Triton kernel of its own: it must compute the result with its own "
                       "kernels, not return PyTorch's")
        problem = problem or self._returned_before(guards.output_tensors(output, parts)) \
            or self._tampering(fingerprint=not timed)
        if problem:
            raise Rejected(problem)
        self.previous_output = guards.output_tensors(output, parts)
        self.earlier_outputs.extend(weakref.ref(tensor) for tensor in self.previous_output)
        return self.previous_output

    def _returned_before(self, tensors: tuple) -> str | None:
        """An output that is, or shares memory with, one kernel_fn returned on any earlier call and still holds.

        The judge lets go of every output it has checked: one still alive after that is held by the kernel, and
        handing it back is a cache, whatever its key (a user's model would get an earlier call's result)."""
        alive = [earlier for earlier in (ref() for ref in self.earlier_outputs) if earlier is not None]
        self.earlier_outputs = [weakref.ref(earlier) for earlier in alive]
        for tensor in tensors:
            if tensor.numel() and any(guards.overlaps(tensor, earlier) for earlier in alive):
                return ("kernel_fn returned an output it had returned on an earlier call (the same memory): it caches "
                        "its result; each call must compute a fresh tensor from its inputs' values")
        return None

    def _checked_call(self, inputs: dict, poison: bool, parts: int) -> tuple[torch.Tensor, ...]:
        before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        VIOLATIONS.clear()
        launches = self.counter.count
        with guards.poisoned_allocations() if poison else contextlib.nullcontext(), self._watching():
            output = self._run_kernel(**inputs)
        self.clock.sync()
        tensors = self._after_call(output, inputs, launches, parts)
        for name, original in before.items():
            if not correctness.same_bits(original, inputs[name]):
                raise Rejected(f"kernel_fn modified its input {name!r} in place; inputs must be left unchanged")
        return tensors

    # ------------------------------------------------------------------ requests
    def load(self) -> tuple[dict, list]:
        if self.source_digest and hashlib.sha256(self.kernel_path.read_bytes()).hexdigest() != self.source_digest:
            raise Rejected(f"{self.kernel_path.name} changed after the judge read its source: the file judged must "
                           "be the file checked")
        VIOLATIONS.clear()
        try:
            module, self.kt = load_kernel(self.kernel_path)
        finally:
            problem = VIOLATIONS.first() or self._tampering()
            if problem:
                raise Rejected(problem.replace("the kernel ", f"{self.kernel_path.name} ", 1))
        self.kernel_fn = module.kernel_fn
        return {"kernel_type": self.kt.name}, []

    def call(self, request: dict) -> tuple[dict, list]:
        inputs = correctness.case_inputs(self.kt, request["case"], self.device.type)
        parts = int(request.get("parts", 1))
        # Repeats (the determinism stage) run on the same values at other addresses: the same bits must come back.
        flips = (0, *correctness.ADDRESS_FLIPS)
        outputs = [self._checked_call(correctness.relocated(inputs, flips[index % len(flips)]) if index else inputs,
                                      bool(request.get("poison", True)), parts)
                   for index in range(int(request.get("repeat", 1)))]
        return {}, [tensor for output in outputs for tensor in output]

    def time_begin(self, request: dict) -> tuple[dict, list]:
        self.timed_case = request["case"]
        self.timed_parts = int(request.get("parts", 1))
        self.timed_inputs = correctness.case_inputs(self.kt, self.timed_case, self.device.type)
        self.last_output = self.witness = self.unproven = None
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        return {}, []

    def iterate(self, request: dict) -> tuple[dict, list]:
        seed, pad_cycles = request.get("seed"), request.get("pad_cycles", 0)
        if not isinstance(seed, int) or not isinstance(pad_cycles, int) or pad_cycles < 0:
            raise RuntimeError(f"bad seed {seed!r} or pad_cycles {pad_cycles!r}")
        fresh = correctness.case_inputs(self.kt, {**self.timed_case, "seed": seed}, self.device.type)
        for name, tensor in self.timed_inputs.items():
            if isinstance(tensor, torch.Tensor):
                # Through .data, a write the tensor's version counter does not see: a kernel that keys a cache on
                # its input's address and _version misses only where the values it would see changed, as a user's
                # recycled activation (same address, same version, new values) would have it.
                tensor.data.copy_(fresh[name])
        self.last_output = self.unproven = None
        if request.get("empty"):
            # The bracket's own cost: the same drawing, flush, pad, messages and proof, around a call of nothing
            # (watched like the kernel's calls, so it includes the profiler's cost too).
            with self._watching():
                _, record = timing.timed_call(self.clock, _empty_call, {}, self._started, self._idle,
                                              pad_cycles=pad_cycles)
            self.unproven = (None, fresh, 0)
            return {"record": record}, []
        VIOLATIONS.clear()
        launches, ops = self.counter.count, self.no_library_compute.ops
        with self._watching():      # around the judge's flush and pad too: PyTorch kernels, which it allows
            output, record = timing.timed_call(self.clock, self._run_kernel, self.timed_inputs, self._started,
                                               self._idle, pad_cycles=pad_cycles)
        # The host time of the call as a model pays it: without the judge's own guard (guard_cost_ms).
        guard_ms = self.guard_per_call_ms + self.guard_per_op_ms * (self.no_library_compute.ops - ops)
        record["launch_ms"], record["guard_ms"] = max(0.0, record["launch_ms"] - guard_ms), guard_ms
        problem = guards.output_problem(output, self.timed_inputs, self.previous_output, self.device, self.timed_parts)
        if problem:
            raise Rejected(problem)
        self.unproven = (output, fresh, launches)
        if self.device.type == "cuda":
            record["peak_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        return {"record": record}, []

    def proof(self, request: dict) -> tuple[dict, list, object]:
        """The elements of the call just timed at the positions the judge chose (none where it checks nothing),
        so the work is proven done before the judge's clock stops; the call's own checks come after the reply."""
        if self.unproven is None:
            raise RuntimeError("no timed call to prove")
        output, fresh, launches = self.unproven
        self.unproven = None
        positions = request.get("positions")
        if output is None:      # an empty call: the same gather, from its first input
            first = next(t for t in self.timed_inputs.values() if isinstance(t, torch.Tensor)).reshape(-1)
            return {}, [first[torch.tensor(chosen, dtype=torch.int64, device=first.device) % max(first.numel(), 1)]
                        for chosen in positions], None
        tensors = guards.output_tensors(output, self.timed_parts)
        return {}, self._gather(tensors, positions), lambda: self._settle(output, fresh, launches)

    def _settle(self, output, fresh: dict, launches: int) -> tuple[dict, list]:
        output = self._after_call(output, self.timed_inputs, launches, self.timed_parts, timed=True)
        for name, tensor in self.timed_inputs.items():
            if isinstance(tensor, torch.Tensor) and not correctness.same_bits(tensor, fresh[name]):
                raise Rejected(f"kernel_fn modified its input {name!r} in place during timing; inputs must be "
                               "left unchanged")
        self._check_witness(output)
        self.last_output = output
        return {"checked": True}, []

    def sample(self, request: dict) -> tuple[dict, list]:
        """The last timed output's elements at the flat positions the judge chose after the call, per tensor."""
        if self.last_output is None:
            raise RuntimeError("no timed call to sample the output of")
        return {}, self._gather(self.last_output, request["positions"])

    @staticmethod
    def _gather(tensors: tuple, positions) -> list:
        if not isinstance(positions, list) or len(positions) != len(tensors):
            raise RuntimeError(f"positions for {len(positions) if isinstance(positions, list) else '?'} tensors, "
                               f"the output has {len(tensors)}")
        return [tensor.reshape(-1)[torch.tensor(chosen, dtype=torch.int64, device=tensor.device)]
                for tensor, chosen in zip(tensors, positions)]

    def _check_witness(self, output: tuple[torch.Tensor, ...]) -> None:
        """The first timed output is kept, with a copy: no later call may write into it."""
        if self.witness is None:
            self.witness = (output, tuple(tensor.clone() for tensor in output))
            return
        kept, copy = self.witness
        if not all(correctness.same_bits(a, b) for a, b in zip(kept, copy)):
            raise Rejected("kernel_fn wrote into an output it had returned on an earlier call: it returns a "
                           "persistent buffer; each call must return a fresh tensor")

    def output(self, request: dict) -> tuple[dict, list]:
        if self.last_output is None:
            raise RuntimeError("no timed call to send the output of")
        problem = self._tampering()
        if problem:
            raise Rejected(problem)
        return {}, list(self.last_output)

    def _started(self) -> None:
        wire.send(self.sock, {"started": True})

    def _idle(self) -> None:
        wire.send(self.sock, {"idle": True})

    def _attempt(self, action) -> tuple[dict, list]:
        try:
            return action()
        except Rejected as rejected:
            return {"fail": str(rejected)}, []
        except Exception as exc:  # the candidate's exception, or one of our guards' refusals
            noted = VIOLATIONS.first()
            return ({"fail": noted}, []) if noted else ({"crash": crash_message(exc, self.kernel_path)}, [])

    def serve(self) -> int:
        handlers = {"call": self.call, "time_begin": self.time_begin, "iterate": self.iterate, "proof": self.proof,
                    "output": self.output, "sample": self.sample,
                    "compiled": lambda _: ({"compiled": self.counter.report()}, [])}
        header, tensors = self._attempt(self.load)
        wire.send(self.sock, header, tensors)
        if "fail" in header or "crash" in header:
            return 1
        while True:
            request, _ = wire.receive(self.sock, 0)
            if request.get("op") == "exit" or request.get("op") not in handlers:
                return 0
            header, tensors, *after = self._attempt(lambda: handlers[request["op"]](request))
            wire.send(self.sock, header, tensors)
            if after and after[0] is not None:      # checks that run once the reply is out: a second reply
                wire.send(self.sock, *self._attempt(after[0]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="the candidate's worker process (started by bench.py)")
    parser.add_argument("--fd", type=int, required=True, help="this end of the judge's socket pair")
    parser.add_argument("--kernel", required=True, help="the kernel file")
    parser.add_argument("--parent", type=int, required=True, help="the judge's process id")
    parser.add_argument("--source-digest", default=None, help="the sha256 of the source the judge checked")
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    sock = socket.socket(fileno=args.fd)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    code = Worker(sock, Path(args.kernel), device, args.source_digest).serve()
    # Exit at once: the kernel's atexit handlers and the interpreter's teardown have nothing to add.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
