"""Which judge workers a run gets: none (the one-GPU loop), a local pool, or a Ray cluster's GPUs.

`--gpus N` (default: every visible GPU) picks the local pool when N > 1: one worker process per
GPU (autokernel/fleet/pool.py). Without a GPU, `--gpus N` makes N logical GPUs, parallel judges in
Triton's interpreter (tests use them; timings there mean nothing anyway). `--ray auto|ADDRESS`
runs the workers as Ray actors on a cluster the user already has (autokernel/fleet/ray_pool.py; Ray
is an optional extra, imported only then), one per GPU, N of them, or every GPU of the cluster.

Several candidates judged at once need the sandbox's file-system confinement (Landlock): one
GPU's candidate could otherwise write into the repository while the loop commits another's, and
the checks after a bench (autokernel/search/integrity.py) cannot tell whose change it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from autokernel.core.contracts import RunSettings
from autokernel.core.errors import OptimizationError
from autokernel.core.live import ProgressView
from autokernel.fleet import pool as pools
from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV

log = logging.getLogger(__name__)

UNCONFINED = ("--gpus {count} judges several candidates at once, which needs the sandbox's file-system confinement "
              "(Landlock), and it is off here ({why}); run with --gpus 1")


def check(settings: RunSettings) -> int:
    """How many workers the settings ask for (0: as many as the Ray cluster has GPUs), or OptimizationError
    saying why they cannot be had: called before a run creates anything, so a refusal strands nothing."""
    if settings.ray:
        from autokernel.fleet import ray_pool

        ray_pool.check(settings.ray)
        count = settings.gpus or 0
    else:
        devices = pools.visible_devices()
        count = settings.gpus or max(1, len(devices))
        if devices and count > len(devices):
            raise OptimizationError(f"--gpus {count}: this machine has {len(devices)} visible GPU(s)")
    if count != 1 and not runner.filesystem_confined():
        why = f"{CONFINE_ENV}=0" if os.environ.get(CONFINE_ENV) == "0" else "no Landlock in this kernel"
        if settings.gpus is None and not settings.ray:
            # Every visible GPU is only the default: without confinement the run keeps to one, as it
            # always could, rather than refusing what the user did not ask for.
            log.warning("using 1 of %d GPUs: judging several candidates at once needs the sandbox's file-system "
                        "confinement (Landlock), which is off here (%s)", count, why)
            return 1
        raise OptimizationError(UNCONFINED.format(count=count or "N", why=why))
    return count


@contextlib.contextmanager
def open_pool(settings: RunSettings, view: ProgressView) -> Iterator[pools.WorkerPool | None]:
    """The run's workers for its settings, stopped at the end; None for the one-GPU loop."""
    count = check(settings)
    if settings.ray:
        from autokernel.fleet import ray_pool

        view.phase(f"connecting to the Ray cluster at {settings.ray}")
        pool = ray_pool.connect(settings.ray, settings.gpus)
    elif count == 1:
        yield None
        return
    else:
        devices = pools.visible_devices()
        pool = pools.LocalPool(devices[:count] if devices else list(range(count)))
    view.log(f"{pool.size} judge workers ({pool.kind}): {', '.join(pool.labels)}"
             + ("" if pools.visible_devices() or settings.ray else " (logical GPUs: no CUDA here)"))
    try:
        yield pool
    finally:
        pool.close()
