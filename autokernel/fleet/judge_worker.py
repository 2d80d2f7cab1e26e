"""A judge worker: judges one candidate at a time on the one GPU it was given, for the local pool and for Ray.

The orchestrator (autokernel/search/parallel_loop.py) sends a JudgeTask: the whole candidate kernel file
and bench.py's arguments. `judge` writes the file into a private folder of its own, so candidates
judged side by side never share a file, and runs the judge through the one child-process runner
(autokernel/judge/runner.py: the sandbox, the allow-listed environment, the nonce). It runs the quick
screen, and then, when the screen beat the job's best (`full_below_us`), the full judge, on the
same GPU, and a final verdict the loop would keep goes through the user's-process check there too: a candidate's timings never share a GPU with another's, because a worker takes its next
task only when it has answered. The GPU is the one CUDA_VISIBLE_DEVICES names in the worker's
environment (set by the local pool per process, by Ray per actor).

The local pool starts `python -m autokernel.fleet.judge_worker LABEL` per GPU, with the allow-listed
environment (no API key reaches it), and speaks JSON lines on its stdin and stdout. Ray runs the
same `judge` function inside an actor (autokernel/fleet/ray_pool.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from autokernel.core import paths
from autokernel.core.contracts import TIMEOUT, BenchResult, JudgeOutcome, JudgeTask
from autokernel.judge import runner, user_check

_PR_SET_PDEATHSIG = 1


def judge(task: JudgeTask, gpu: str) -> JudgeOutcome:
    """bench.py on task's candidate, in a private folder; the screen, then the full judge where it earned one."""
    started = time.monotonic()
    slot = tempfile.mkdtemp(prefix="autokernel-candidate-")
    bench_script = task.bench_script if task.bench_script and Path(task.bench_script).exists() else None
    seconds: dict[str, float] = {}
    check_seconds = None
    try:
        kernel = Path(slot) / "kernel.py"
        kernel.write_text(task.kernel_source)

        def bench(kind: str, extra_args: list[str], timeout_s: float) -> BenchResult:
            begun = time.monotonic()
            result = runner.run_bench(kernel, shapes=task.shapes, dtype=task.dtype, timeout_s=timeout_s,
                                      seed=task.seed, extra_args=extra_args, bench_script=bench_script,
                                      readable=[slot])
            seconds[kind] = time.monotonic() - begun
            return result

        result = bench("quick", list(task.extra_args), task.timeout_s)
        if (task.full_timeout_s and task.full_below_us and result.passed
                and (result.latency_us or float("inf")) < task.full_below_us):
            result = bench("full", [arg for arg in task.extra_args if arg not in ("--screen", "--quick")],
                           task.full_timeout_s)
        if user_check.would_keep(result, task.best_us, task.noise):
            # On this GPU, before the worker takes its next task: the check never shares a GPU with a timing. (Its
            # time is check_seconds, not bench_seconds, which estimate what benches cost.)
            begun = time.monotonic()
            result = user_check.keep_only_if_checked(result, kernel, kernel_type=task.kernel_type, shapes=task.shapes,
                                                     dtype=task.dtype, seed=task.seed, readable=[slot],
                                                     timeout_s=task.check_timeout_s or user_check.TIMEOUT_S)
            check_seconds = None if result.correctness == TIMEOUT else time.monotonic() - begun
    finally:
        shutil.rmtree(slot, ignore_errors=True)
    return JudgeOutcome(result=result, gpu=gpu, seconds=time.monotonic() - started, bench_seconds=seconds,
                        check_seconds=check_seconds)


def serve(label: str, requests, replies) -> None:
    """Answer each JSON line on `requests` (a JudgeTask) with one JSON line (a JudgeOutcome) on `replies`."""
    for line in requests:
        if not line.strip():
            continue
        outcome = judge(JudgeTask.from_json(json.loads(line)), label)
        replies.write(json.dumps(outcome.to_json()) + "\n")
        replies.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Dies with the orchestrator, even by SIGKILL (its bench child dies with it in turn: runner.py).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        return 1
    paths.use_workdir()         # the pool names the orchestrator's work directory (AUTOKERNEL_WORKDIR)
    # The protocol owns stdout: anything else printed here goes to stderr.
    replies, sys.stdout = sys.stdout, sys.stderr
    serve(argv[0] if argv else "gpu0", sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
