"""The one place that runs candidate code: a child process with a time limit, its own process group and no secrets.

Everything that executes code an agent wrote (bench.py, whose worker imports kernel.py) goes through
`run_child`, so a kernel that hangs, forks, floods its output or reads the environment cannot take
the loop down with it or leak an API key. `run_bench` wraps it for the judge and always returns a
bench-shaped result dict, inventing a TIMEOUT or CRASH result when bench.py could not write one.
"""

from __future__ import annotations

import fnmatch
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from autokernel import paths
from autokernel.registry import Shape, format_shape
# run_bench puts a fresh secret in bench.py's environment there; bench.py takes it out before it starts the
# candidate's worker and writes it into its JSON result. A result file without it was not written by the judge.
from autokernel.worker_process import NONCE_VARIABLE

# Variables a kernel has no business reading: the agents' keys and anything that looks like a credential.
SECRET_PATTERNS = ("ANTHROPIC_*", "OPENAI_*", "*_API_KEY", "*_TOKEN", "*SECRET*", "*PASSWORD*", "*CREDENTIAL*")
# Kept per stream; a kernel printing in a loop must not fill the loop's memory. The tail is what matters.
OUTPUT_LIMIT_BYTES = 256 * 1024
# How long a timed-out child gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 3.0
STDERR_LINES_IN_MESSAGE = 20

# The fields of bench.py's JSON result (docs/architecture.md); a synthesized result has them all.
BENCH_FIELDS = ("kernel_type", "correctness", "failed_stage", "message", "throughput", "throughput_unit",
                "latency_us", "pct_peak", "bound", "speedup_vs_pytorch", "speedup_vs_compile",
                "pytorch_latency_us", "compile_latency_us", "peak_vram_mb", "seed", "device", "dtype",
                "timing_shapes", "timings_meaningful", "wall_seconds")


@dataclass
class ChildResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_seconds: float


def scrubbed_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment without anything that matches SECRET_PATTERNS (case-insensitive)."""
    env = dict(os.environ if base is None else base)
    return {name: value for name, value in env.items()
            if not any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in SECRET_PATTERNS)}


class _TailReader(threading.Thread):
    """Drains one pipe so the child never blocks on a full pipe, keeping only the last bytes."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.kept = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while chunk := self.stream.read1(65536):
            self.kept += chunk
            if len(self.kept) > OUTPUT_LIMIT_BYTES:
                excess = len(self.kept) - OUTPUT_LIMIT_BYTES
                del self.kept[:excess]
                self.dropped += excess
        self.stream.close()

    def text(self) -> str:
        body = self.kept.decode("utf-8", errors="replace")
        return f"[... {self.dropped} bytes of output dropped ...]\n{body}" if self.dropped else body


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the child's whole group, then SIGKILL whatever is still there after the grace period."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def run_child(cmd: Sequence[str], *, timeout_s: float, cwd: str | Path,
              env_extra: Mapping[str, str] | None = None) -> ChildResult:
    """Run cmd in a new session with a scrubbed environment; kill its whole process group on timeout.

    The group is also killed when the caller is interrupted (Ctrl-C lands here while we wait) and
    after a normal exit, so grandchildren a kernel left behind do not outlive the experiment.
    """
    env = scrubbed_environment()
    env.update(env_extra or {})
    started = time.monotonic()
    proc = subprocess.Popen(list(cmd), cwd=str(cwd), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    readers = [_TailReader(proc.stdout), _TailReader(proc.stderr)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop_group(proc)
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        # The leader is gone by now; its leftovers would otherwise keep the pipes (and readers) open.
        # A grandchild that escaped into a session of its own can still hold them, hence the join limit.
        _signal_group(proc.pid, signal.SIGKILL)
        for reader in readers:
            reader.join(timeout=KILL_GRACE_S)
    return ChildResult(returncode=proc.returncode, stdout=readers[0].text(), stderr=readers[1].text(),
                       timed_out=timed_out, wall_seconds=time.monotonic() - started)


def synthesized_result(correctness: str, message: str, *, kernel_type: str | None = None,
                       dtype: str | None = None, seed: int | None = None,
                       wall_seconds: float | None = None) -> dict:
    """A bench-shaped result for a run that produced none (TIMEOUT or CRASH)."""
    result = dict.fromkeys(BENCH_FIELDS)
    result.update(kernel_type=kernel_type, correctness=correctness, message=message, dtype=dtype,
                  seed=seed, wall_seconds=wall_seconds, timings_meaningful=False)
    return result


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def bench_command(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, json_out: str | Path,
                  seed: int | None = None, extra_args: Sequence[str] = (),
                  bench_script: str | Path = paths.BENCH_SCRIPT) -> list[str]:
    cmd = [sys.executable, str(bench_script), "--kernel", str(kernel_path)]
    for shape in shapes:
        cmd += ["--shape", format_shape(shape)]
    cmd += ["--dtype", dtype, "--json-out", str(json_out)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra_args)


def run_bench(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, timeout_s: float,
              seed: int | None = None, extra_args: Sequence[str] = (),
              bench_script: str | Path = paths.BENCH_SCRIPT) -> dict:
    """Judge one kernel file with bench.py in a child process and return bench's JSON result.

    A bench run that times out becomes correctness TIMEOUT; one that dies without writing its
    JSON (a syntax error that kills the import, a segfault, an out-of-memory kill) becomes CRASH
    with the end of its stderr in "message". So does a result file that lacks this run's nonce
    (the kernel wrote it, not the judge), or that says PASS while bench.py exited otherwise.
    """
    bench_script = Path(bench_script)
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="autokernel-bench-") as tmp:
        json_out = Path(tmp) / "result.json"
        cmd = bench_command(kernel_path, shapes=shapes, dtype=dtype, json_out=json_out, seed=seed,
                            extra_args=extra_args, bench_script=bench_script)
        child = run_child(cmd, timeout_s=timeout_s, cwd=bench_script.parent, env_extra={NONCE_VARIABLE: nonce})
        written = json_out.read_text() if json_out.exists() else ""
    common = dict(dtype=dtype, seed=seed, wall_seconds=round(child.wall_seconds, 3))
    if child.timed_out:
        return synthesized_result("TIMEOUT", f"bench.py ran past its {timeout_s:g} s limit and was killed",
                                  **common)
    try:
        result = json.loads(written)
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = _last_lines(child.stderr, STDERR_LINES_IN_MESSAGE) or _last_lines(child.stdout, STDERR_LINES_IN_MESSAGE)
        return synthesized_result("CRASH", f"bench.py exited with code {child.returncode} without a result:\n{tail}",
                                  **common)
    if result.pop("nonce", None) != nonce:
        return synthesized_result("CRASH", "the result file was not written by the judge (it lacks this run's "
                                           f"nonce); bench.py exited with code {child.returncode}", **common)
    if result.get("correctness") == "PASS" and child.returncode != 0:
        return synthesized_result("CRASH", f"the result says PASS but bench.py exited with code {child.returncode}",
                                  **common)
    result.setdefault("wall_seconds", common["wall_seconds"])
    return result
