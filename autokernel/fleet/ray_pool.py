"""The judge workers on a Ray cluster the user already has: one actor per GPU, running judge_worker.judge.

`connect("auto" | ADDRESS, gpus)` joins the cluster (Ray is an optional extra: `pip install
autokernel[ray]`, imported only here) and starts one actor per GPU with num_gpus=1, so Ray pins
each to a GPU of its own (CUDA_VISIBLE_DEVICES in the actor). An actor runs the very function the
local pool's processes run (autokernel/fleet/judge_worker.py), with the judge it finds on its machine.
A task carries the candidate's kernel file and bench.py's arguments, never a key; an actor also
drops, at start, any variable that looks like a credential that its machine's Ray gave it. An
actor that dies (its node lost, a kill) takes only its candidate: it comes back a CRASH, and a new
actor takes the GPU (WorkerPool).
"""

from __future__ import annotations

import fnmatch
import os
import socket

from autokernel.core.contracts import JudgeOutcome, JudgeTask
from autokernel.core.errors import OptimizationError
from autokernel.core.throughput import Throughput
from autokernel.fleet.pool import WorkerPool
from autokernel.sandbox.child_env import SECRET_PATTERNS

INSTALL_HINT = "pip install 'autokernel[ray]'"
REACH_TIMEOUT_S = 5.0


class JudgeActor:
    """One GPU's judge, as a Ray actor (made remote with num_gpus=1 by RayPool)."""

    def __init__(self):
        import ray

        for name in list(os.environ):
            if any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in SECRET_PATTERNS):
                del os.environ[name]
        gpus = ray.get_gpu_ids()
        self.label = f"{ray.util.get_node_ip_address()}/gpu{gpus[0] if gpus else '?'}"

    def name(self) -> str:
        return self.label

    def pid(self) -> int:
        return os.getpid()

    def judge(self, task: dict) -> dict:
        from autokernel.fleet.judge_worker import judge

        return judge(JudgeTask.from_json(task), self.label).to_json()


class RayPool(WorkerPool):
    kind = "Ray"

    def __init__(self, ray, count: int, throughput: Throughput | None = None):
        self.ray = ray
        self.actor_class = ray.remote(num_gpus=1)(JudgeActor)
        self.actors: dict[int, object] = {}
        self.pending: dict[object, int] = {}          # a task's ObjectRef -> the slot judging it
        super().__init__([f"ray{slot}" for slot in range(count)], throughput)

    def _start(self, slot: int) -> None:
        actor = self.actor_class.remote()
        self.actors[slot] = actor
        try:
            self.labels[slot] = self.ray.get(actor.name.remote(), timeout=120)
        except self.ray.exceptions.RayError as exc:
            raise OptimizationError(f"a Ray judge actor did not start: {exc}") from exc

    def _send(self, slot: int, task: JudgeTask) -> None:
        self.pending[self.actors[slot].judge.remote(task.to_json())] = slot

    def _poll(self, timeout_s: float | None):
        if not self.pending:
            return None
        ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=timeout_s)
        if not ready:
            return None
        slot = self.pending.pop(ready[0])
        try:
            return slot, JudgeOutcome.from_json(self.ray.get(ready[0])), ""
        except self.ray.exceptions.RayError as exc:
            return slot, None, " ".join(str(exc).split())[:300]

    def actor_pids(self) -> dict[str, int]:
        """Each GPU's actor process id (tests kill one mid-experiment)."""
        return {self.labels[slot]: self.ray.get(actor.pid.remote()) for slot, actor in self.actors.items()}

    def close(self) -> None:
        for actor in self.actors.values():
            try:
                self.ray.kill(actor)
            except Exception:       # an actor already gone
                pass
        self.actors, self.pending = {}, {}


def _import_ray():
    try:
        import ray
    except ImportError:
        raise OptimizationError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail in seconds, naming the address, when nothing listens there (ray.init would wait much longer)."""
    host_port = address.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise OptimizationError(f"--ray {address}: give 'auto' or a cluster address such as 10.0.0.5:6379 "
                                f"(or ray://10.0.0.5:10001)")
    try:
        socket.create_connection((host, int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise OptimizationError(f"cannot reach the Ray cluster at {address} ({exc}); check the address and that "
                                f"the cluster is up (ray status on its head node)") from None


def check(address: str) -> None:
    """Before a run creates anything: Ray is installed, and a named cluster answers."""
    _import_ray()
    if address != "auto":
        _check_reachable(address)


def connect(address: str, gpus: int | None) -> RayPool:
    """Join the cluster at address ("auto": the one this machine belongs to) and start one actor per GPU."""
    ray = _import_ray()
    if not ray.is_initialized():
        if address != "auto":
            _check_reachable(address)
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise OptimizationError(f"cannot join the Ray cluster at --ray {address}: {' '.join(str(exc).split())} "
                                    f"(start one with `ray start --head`, or give its address)") from None
    available = int(ray.cluster_resources().get("GPU", 0))
    if available < 1:
        raise OptimizationError("the Ray cluster has no GPUs: each judge worker needs one (num_gpus=1)")
    count = gpus or available
    if count > available:
        raise OptimizationError(f"--gpus {count}: the Ray cluster has {available} GPU(s)")
    return RayPool(ray, count)
