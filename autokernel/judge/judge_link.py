"""The judge's side of the candidate's worker: ask it for outputs and timings, stop it.

The worker (autokernel/judge/candidate/worker.py, started by autokernel/judge/candidate/worker_process.py) is the
only process that runs candidate code. Its stdout and stderr come back through a pipe that the judge prints line by
line, prefixed "kernel| ", to its own stderr, and its messages are flattened to one line, so nothing the kernel
prints can pass for the judge's RESULT line. Every reply is untrusted data
(autokernel/core/wire.py): the judge decides PASS or FAIL itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import torch

from autokernel.core import wire
from autokernel.core.contracts import CRASH, FAIL
from autokernel.judge import worker_cpu
from autokernel.judge.candidate import worker_process
from autokernel.judge.timing import TimedCall
from autokernel.sandbox import process_tree
from autokernel.sandbox.redact import Redactor

OUTPUT_PREFIX = "kernel| "
OUTPUT_LIMIT_BYTES = 1 << 20       # what the judge echoes of the kernel's prints; the rest is counted
TAIL_LINES = 20
EXIT_GRACE_S = 2.0
STRAY_GRACE_S = 1.0        # how long a process of the worker's may take to end (a compiler exiting) before it counts
COMPILED_FIGURES = ("registers", "spills", "shared_bytes", "num_warps", "num_stages")
MAX_COMPILED_KERNELS = 8
# A compiled kernel's name reaches the judge's printout and the prompt: a Python name, or "?" for what is not.
_NOT_A_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.]")


class WorkerFailure(Exception):
    """The worker reported a FAIL or CRASH, or died; kind is "FAIL" or "CRASH"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _small(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _is_grid(value) -> bool:
    """A launch grid as the worker reports it: three sizes (x, y, z)."""
    return isinstance(value, list) and len(value) == 3 and all(_small(size) for size in value)


def _one_line(text, limit: int = 2000) -> str:
    """A message from the worker as one bounded line: it cannot add lines of its own to the judge's output."""
    return " ".join(str(text).split())[:limit]


class _OutputPump(threading.Thread):
    """Copies the worker's output to the judge's stderr with a prefix, and keeps the last lines."""

    def __init__(self, stream, sink):
        super().__init__(daemon=True)
        self.stream, self.sink = stream, sink
        self.redact = Redactor()        # what the kernel prints may be what it read: no secret passes on
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.echoed = self.dropped = 0

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = self.redact(raw.decode("utf-8", errors="replace").rstrip("\n")[:2000])
            self.tail.append(line)
            if self.echoed < OUTPUT_LIMIT_BYTES:
                self.echoed += len(line) + 1
                self.sink.write(f"{OUTPUT_PREFIX}{line}\n")
                self.sink.flush()
            else:
                self.dropped += 1
        self.stream.close()


class CandidateWorker:
    """One worker process for one kernel file."""

    def __init__(self, kernel_path: Path, sink=None):
        self.kernel_path = kernel_path
        self.timed_parts = 1        # the tensors of one output in the timed calls (time_begin)
        self.proc, self.sock = worker_process.started_for(kernel_path)
        # The judge's own children: those from before the worker started, and torch.compile's (note_judges_own).
        self.judges_own = worker_process.judges_own(self.proc.pid)
        self.pump = _OutputPump(self.proc.stdout, sink or sys.stderr)
        self.pump.start()

    # ------------------------------------------------------------------ processes
    def strays(self) -> list[int]:
        """Running processes of the worker's making: below it, or left to the judge (a child subreaper,
        worker_process.seal_judge) by a parent that exited; not the judge's own (judges_own)."""
        me = os.getpid()
        orphans = [pid for pid in process_tree.children(me)
                   if pid != self.proc.pid and pid not in self.judges_own and process_tree.running(pid)]
        return process_tree.running_below(self.proc.pid) + orphans + [
            pid for orphan in orphans for pid in process_tree.running_below(orphan)]

    def check_alone(self) -> None:
        """The worker must be the only process of the candidate's whenever it answers the judge. A compiler it
        runs (ptxas, a C compiler for Triton's launcher, nvcc) ends before the call returns; a process that stays
        could speak for it (a relay between the judge and the worker rewriting its replies) or compute for it."""
        deadline = time.monotonic() + STRAY_GRACE_S
        while (strays := self.strays()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if strays:
            raise WorkerFailure(FAIL, f"the kernel's process started {len(strays)} other process(es) still running "
                                      f"(pid {', '.join(map(str, strays[:5]))}): a kernel may start only compilers "
                                      "that finish before its call returns")

    def note_judges_own(self) -> None:
        """The judge's own children (torch.compile's compile workers) started since: not the candidate's. Called
        only while the worker runs nothing of the kernel's, right after the judge compiled."""
        self.judges_own.update(pid for pid in process_tree.children(os.getpid()) if pid != self.proc.pid)

    # ------------------------------------------------------------------ messages
    def _died(self) -> WorkerFailure:
        try:
            code = self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        self.pump.join(timeout=EXIT_GRACE_S)
        how = "is still running but closed its channel" if code is None else f"exited with code {code}"
        tail = "\n".join(OUTPUT_PREFIX + line for line in self.pump.tail)
        return WorkerFailure(CRASH, f"the kernel's process {how} without answering the judge"
                                      f"{':' + chr(10) + tail if tail else ''}")

    def receive(self, tensor_limit_bytes: int = 0) -> tuple[dict, list[torch.Tensor]]:
        try:
            header, tensors = wire.receive(self.sock, tensor_limit_bytes)
        except (wire.WireError, OSError) as exc:
            if isinstance(exc, wire.WireError) and "closed" not in str(exc):
                raise WorkerFailure(FAIL, f"the kernel's process sent something that is not a reply: {exc}") from None
            raise self._died() from None
        if "fail" in header:
            raise WorkerFailure(FAIL, _one_line(header["fail"]))
        if "crash" in header:
            raise WorkerFailure(CRASH, _one_line(header["crash"]))
        return header, tensors

    def request(self, header: dict, tensor_limit_bytes: int = 0) -> tuple[dict, list[torch.Tensor]]:
        try:
            wire.send(self.sock, header)
        except OSError:
            raise self._died() from None
        return self.receive(tensor_limit_bytes)

    def _expect(self, tensors: list, count: int) -> list[torch.Tensor]:
        if len(tensors) != count:
            raise WorkerFailure(FAIL, f"the kernel's process sent {len(tensors)} outputs where {count} were asked")
        return tensors

    # ------------------------------------------------------------------ requests
    def hello(self) -> str:
        """The kernel type the kernel file declares (raises WorkerFailure if it did not load)."""
        header, _ = self.receive()
        kernel_type = header.get("kernel_type")
        if not isinstance(kernel_type, str):
            raise WorkerFailure(FAIL, "the kernel's process did not say which kernel type it loaded")
        self.check_alone()
        return kernel_type

    def call(self, case: dict, *, repeat: int = 1, poison: bool = True, parts: int = 1,
             output_bytes: int = 0) -> list[tuple[torch.Tensor, ...]]:
        """The outputs of `repeat` checked calls, each as its `parts` tensors (more than one where the
        reference returns a tuple: torch.max(x, dim)'s values and indices)."""
        _, tensors = self.request({"op": "call", "case": case, "repeat": repeat, "poison": poison, "parts": parts},
                                  repeat * output_bytes)
        tensors = self._expect(tensors, repeat * parts)
        self.check_alone()
        return [tuple(tensors[i * parts:(i + 1) * parts]) for i in range(repeat)]

    def time_begin(self, case: dict, parts: int = 1) -> None:
        self.timed_parts = parts
        self.request({"op": "time_begin", "case": case, "parts": parts})

    def iterate(self, seed: int, pad_cycles: int = 0, positions: list[list[int]] | None = None,
                empty: bool = False, cpu_clock: bool = False) -> TimedCall:
        """One timed call on fresh inputs from seed (empty: a call of nothing, the bracket's own cost), and at once
        its proof: the output's elements at `positions` (one list per tensor; none by default). pad_cycles of GPU
        sleep after the flush (timing.Clock.pad_cycles).

        The judge's own clock runs from the request (the seed in it is drawn at random just now, so nothing can
        have been computed before) to the proof's reply (the elements it holds are computed by then, so the work
        was done inside it): TimedCall.proof_ms. bracket_ms is the time between the worker's own "started" and
        "idle" (a finer figure, but the worker's to choose). With cpu_clock, also the CPU time the worker's
        processes used over that span (TimedCall.cpu_ms: judge/worker_cpu.py), where it counts all their work. The
        call's own checks run after the proof's reply, off the clock; their failure is raised here."""
        positions = positions if positions is not None else [[] for _ in range(self.timed_parts)]
        cpu_start = worker_cpu.mark(self.proc.pid) if cpu_clock else None
        sent = time.perf_counter()
        try:
            wire.send(self.sock, {"op": "iterate", "seed": int(seed), "pad_cycles": int(pad_cycles), "empty": empty})
        except OSError:
            raise self._died() from None
        self._expect_marker("started")
        started = time.perf_counter()
        self._expect_marker("idle")
        bracket_ms = (time.perf_counter() - started) * 1e3
        header, _ = self.receive()
        record = header.get("record")
        if not isinstance(record, dict) or not all(
                isinstance(record.get(k), (int, float)) for k in ("host_ms", "wall_ms", "kernel_ms")):
            raise WorkerFailure(FAIL, "the kernel's process sent a malformed timing record")
        _, sample = self.request({"op": "proof", "positions": positions},
                                 sum(8 * len(chosen) + 1024 for chosen in positions))
        proof_ms = (time.perf_counter() - sent) * 1e3
        cpu_ms = worker_cpu.ms_since(cpu_start, os.getpid()) if cpu_clock else None
        self._expect(sample, len(positions))
        if not empty:
            self._expect_marker("checked")
        self.check_alone()
        launch_ms = record.get("launch_ms", 0.0)
        if not isinstance(launch_ms, (int, float)) or not 0.0 <= launch_ms <= record["wall_ms"]:
            raise WorkerFailure(FAIL, f"the kernel's process reported a launch time of {launch_ms!r} ms "
                                        f"for a call that took {record['wall_ms']} ms in all")
        return TimedCall({k: float(v) for k, v in record.items() if isinstance(v, (int, float))}, bracket_ms,
                         proof_ms, tuple(sample), cpu_ms)

    def _expect_marker(self, name: str) -> None:
        header, _ = self.receive()
        if header.get(name) is not True:
            raise WorkerFailure(FAIL, f"the kernel's process replied out of turn during timing (expected {name!r})")

    def compiled(self) -> list[dict]:
        """The compiled figures of the kernels kernel_fn launched (worker_guards.compiled_figures), named, and
        the grid of each one's latest launch (x, y, z; reported under the interpreter too).

        They come from the candidate's process, so they are only shown to the agent, never judged;
        anything but small integers under short names is dropped, and a name keeps only the characters
        of a Python name (a line break in it could pass for the judge's RESULT line)."""
        header, _ = self.request({"op": "compiled"})
        reported = header.get("compiled")
        if not isinstance(reported, dict):
            return []
        return [{"kernel": _NOT_A_NAME_CHAR.sub("?", name[:80]),
                 **{key: value for key, value in figures.items() if key in COMPILED_FIGURES and _small(value)},
                 **({"grid": figures["grid"]} if _is_grid(figures.get("grid")) else {})}
                for name, figures in list(reported.items())[:MAX_COMPILED_KERNELS]
                if isinstance(name, str) and isinstance(figures, dict)]

    def last_output(self, output_bytes: int) -> tuple[torch.Tensor, ...]:
        _, tensors = self.request({"op": "output"}, output_bytes)
        return tuple(self._expect(tensors, self.timed_parts))

    def sample(self, positions: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """The last timed output's elements at these flat positions, one list for each of its tensors."""
        limit = sum(8 * len(chosen) + 1024 for chosen in positions)
        _, tensors = self.request({"op": "sample", "positions": positions}, limit)
        return tuple(self._expect(tensors, len(positions)))

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not."""
        try:
            wire.send(self.sock, {"op": "exit"})
            self.proc.wait(timeout=EXIT_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def kill(self) -> None:
        strays = self.strays()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in strays:              # what the worker left dies with it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:              # and is reaped, where it was left to the judge (its other parents reap theirs)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.sock.close()
