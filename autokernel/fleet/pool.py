"""The judge workers, one per GPU: a pool the orchestrator hands candidates to and collects verdicts from.

A worker judges one candidate at a time (autokernel/fleet/judge_worker.py), so two timings never share a
GPU. `WorkerPool` keeps what the local pool and Ray share: which worker is busy with what, each
GPU's busy time (autokernel/core/contracts.py Throughput), and one rule for a worker that dies: its
candidate comes back as a CRASH, a new worker takes its GPU, and the run goes on. The two differ
only in how a worker starts, takes a task and answers: `LocalPool` (here) runs one process per GPU,
pinned by CUDA_VISIBLE_DEVICES, `RayPool` (autokernel/fleet/ray_pool.py) one Ray actor per GPU.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from autokernel.core import paths
from autokernel.core.contracts import CRASH, JudgeOutcome, JudgeTask
from autokernel.core.throughput import Throughput
from autokernel.judge import runner
from autokernel.sandbox.child_env import child_environment

STDERR_KEPT = 20            # lines of a dead worker's stderr in its CRASH message
JUDGE_WORKER_MODULE = "autokernel.fleet.judge_worker"     # each local worker's process


@dataclass
class Finished:
    """A candidate back from its worker: the task, what the caller tagged it with, and the outcome."""
    slot: int
    task: JudgeTask
    token: object
    outcome: JudgeOutcome


def died(task: JudgeTask, gpu: str, why: str, seconds: float) -> JudgeOutcome:
    """The outcome of a candidate whose worker died under it: a CRASH, that experiment only."""
    message = f"the judge worker on {gpu} died in mid-experiment ({why}); the run went on without it"
    return JudgeOutcome(result=runner.synthesized_result(CRASH, message, kernel_type=task.kernel_type,
                                                         dtype=task.dtype, seed=task.seed),
                        gpu=gpu, seconds=seconds)


class WorkerPool:
    """The workers' bookkeeping; subclasses start workers (`_start`), send tasks (`_send`) and hear back (`_poll`)."""

    kind = "pool"

    def __init__(self, labels: list[str], throughput: Throughput | None = None):
        self.labels = list(labels)
        self.throughput = throughput or Throughput()
        self.busy: dict[int, tuple[JudgeTask, object, float]] = {}
        for slot in range(len(self.labels)):
            self._start(slot)

    @property
    def size(self) -> int:
        return len(self.labels)

    def free(self) -> list[int]:
        return [slot for slot in range(self.size) if slot not in self.busy]

    def submit(self, task: JudgeTask, token: object = None, slot: int | None = None) -> int:
        """Hand task to a free worker (slot, where given: that one); returns its slot."""
        slot = self.free()[0] if slot is None else slot
        if slot in self.busy:
            raise ValueError(f"worker {self.labels[slot]} is busy")
        self.busy[slot] = (task, token, time.monotonic())
        self._send(slot, task)
        return slot

    def next_finished(self, timeout_s: float | None = None) -> Finished | None:
        """The next candidate back (a dead worker's as a CRASH, the worker started again); None on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.busy:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            answer = self._poll(wait)
            if answer is None:
                return None
            slot, outcome, why = answer
            if slot not in self.busy:
                continue
            task, token, started = self.busy.pop(slot)
            seconds = time.monotonic() - started
            if outcome is None:
                outcome = died(task, self.labels[slot], why, seconds)
                self._start(slot)
            outcome.gpu = self.labels[slot]
            self.throughput.gpu(self.labels[slot]).busy_s += seconds
            return Finished(slot, task, token, outcome)
        return None

    def judge_all(self, tasks: list[JudgeTask]) -> list[JudgeOutcome]:
        """Judge tasks side by side (at most one per worker) and return their outcomes in order."""
        outcomes: list[JudgeOutcome | None] = [None] * len(tasks)
        waiting = list(enumerate(tasks))
        while waiting or self.busy:
            while waiting and self.free():
                index, task = waiting.pop(0)
                self.submit(task, index)
            finished = self.next_finished()
            outcomes[finished.token] = finished.outcome
        return outcomes

    def close(self) -> None:
        """Stop every worker (a candidate in flight dies with its worker)."""

    # ------------------------------------------------------------------ how workers start, take tasks, answer
    def _start(self, slot: int) -> None:
        raise NotImplementedError

    def _send(self, slot: int, task: JudgeTask) -> None:
        raise NotImplementedError

    def _poll(self, timeout_s: float | None) -> tuple[int, JudgeOutcome | None, str] | None:
        """(slot, outcome or None if the worker died, why it died), or None on timeout."""
        raise NotImplementedError

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class LocalPool(WorkerPool):
    """One worker process per GPU of this machine (CUDA_VISIBLE_DEVICES=<its index>), JSON lines both ways.

    A worker gets the allow-listed environment of a bench child (child_env.child_environment: no API
    key), the work directory, and the GPU it is pinned to; with no GPU, the workers are logical GPUs:
    parallel judges in Triton's interpreter."""

    kind = "local"

    def __init__(self, devices: list[int], throughput: Throughput | None = None):
        self.devices = list(devices)
        # The workers' temporary folders (each candidate's private one): removed with the pool, so a
        # worker killed in mid-experiment leaves nothing behind once the run ends.
        self.scratch = tempfile.mkdtemp(prefix="autokernel-workers-")
        self.processes: dict[int, subprocess.Popen] = {}
        self._answers: queue.Queue = queue.Queue()
        self._stderr: dict[int, list[str]] = {}
        super().__init__([f"gpu{device}" for device in self.devices], throughput)

    def _start(self, slot: int) -> None:
        env = paths.module_environment({
            **child_environment(), "CUDA_VISIBLE_DEVICES": _device_name(self.devices[slot]),
            paths.WORKDIR_VARIABLE: str(paths.ROOT), "PYTHONUNBUFFERED": "1", "TMPDIR": self.scratch})
        process = subprocess.Popen(paths.module_command(JUDGE_WORKER_MODULE, self.labels[slot]),
                                   cwd=str(paths.ROOT), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.processes[slot] = process
        self._stderr[slot] = []
        threading.Thread(target=self._read, args=(slot, process), daemon=True).start()
        threading.Thread(target=self._keep_stderr, args=(slot, process), daemon=True).start()

    def _read(self, slot: int, process: subprocess.Popen) -> None:
        for line in process.stdout:
            try:
                outcome = JudgeOutcome.from_json(json.loads(line))
            except ValueError as exc:
                self._answers.put((slot, process, None, f"it answered something that is not an outcome: {exc}"))
                return
            self._answers.put((slot, process, outcome, ""))
        code = process.wait()
        self._answers.put((slot, process, None, f"killed by signal {-code}" if code < 0 else f"exited with code {code}"))

    def _keep_stderr(self, slot: int, process: subprocess.Popen) -> None:
        for line in process.stderr:
            kept = self._stderr.setdefault(slot, [])
            kept.append(line.rstrip())
            del kept[:-STDERR_KEPT]

    def _send(self, slot: int, task: JudgeTask) -> None:
        try:
            self.processes[slot].stdin.write(json.dumps(task.to_json()) + "\n")
            self.processes[slot].stdin.flush()
        except (BrokenPipeError, OSError):
            pass            # a worker already dead: its reader reports it, and the task comes back a CRASH

    def _poll(self, timeout_s: float | None):
        while True:
            try:
                slot, process, outcome, why = self._answers.get(timeout=timeout_s)
            except queue.Empty:
                return None
            if self.processes.get(slot) is process:       # not the last words of a worker already replaced
                if outcome is None and self._stderr.get(slot):
                    why += "; its last output: " + " | ".join(self._stderr[slot][-5:])
                return slot, outcome, why

    def pids(self) -> dict[str, int]:
        """Each GPU's worker process id (tests kill one mid-experiment)."""
        return {self.labels[slot]: process.pid for slot, process in self.processes.items()}

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass
        self.processes = {}
        shutil.rmtree(self.scratch, ignore_errors=True)


def _device_name(index: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry for this process's device `index` (it may see a subset itself)."""
    seen = [name.strip() for name in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if name.strip()]
    return seen[index] if index < len(seen) else str(index)


def visible_devices() -> list[int]:
    """The CUDA devices this process sees (by index), none without a GPU."""
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
