"""The one place that runs candidate code: a child process in a sandbox, with a time limit and no secrets.

Everything that executes code an agent wrote (the judge, `python -m autokernel.judge.bench`, whose worker imports
kernel.py) goes through
`run_child`, which starts it under the sandbox launcher (autokernel/sandbox/launcher.py). So a kernel that
hangs, forks, leaves daemons in sessions of their own, eats memory, floods its output or reads its
environment cannot take the loop down, outlive the experiment, or leak a secret:
  - the child sees only an allow-list of environment variables (ALLOWED_ENV), and never one that
    looks like a credential, even on the list;
  - while it runs, this process is not dumpable, so /proc/<this pid>/environ and friends are
    closed to it (a root user's child gives up the capabilities that would open them);
  - it gets a private temporary folder, removed afterwards, and writes no Python bytecode;
  - it dies with this process, and every process it started dies with it.
`run_bench` wraps it for the judge and always returns a BenchResult (contracts), inventing a
TIMEOUT or CRASH result when the judge could not write one. The judge's verdict comes back on a pipe
that only the judge holds (never a file, never a path on a command line), and it is read only once
the sandbox has killed everything the candidate started; a candidate that left a process running
is a CRASH, whatever the verdict said. Compiler caches are the experiment's own (`caches_for`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from autokernel.core import paths
from autokernel.core.child_output import TailReader, current_watcher
from autokernel.core.contracts import CRASH, FAIL, PASS, TIMEOUT, BenchResult, ContractError
from autokernel.core.gpu_lock import TIMING_LOCK_VARIABLE
from autokernel.judge import judge_files
from autokernel.kernel_types.base import Shape
from autokernel.kernel_types.regions import store as region_store
from autokernel.kernel_types.registry import format_shape
from autokernel.sandbox import launcher as sandbox
from autokernel.sandbox.process_tree import kill_tree, undumpable
from autokernel.sandbox import redact

# run_bench puts a fresh secret in bench.py's environment there; bench.py takes it out before it starts the
# candidate's worker and writes it into its JSON result. A result file without it was not written by the judge.
from autokernel.judge.candidate.worker_process import CONFINE_ENV, NONCE_VARIABLE, WORKER_CACHE_VARIABLE
from autokernel.sandbox.child_env import caches_for, caches_in, child_environment, outgrown, remove_tree

# CONFINE_ENV=0 turns the Landlock file-system confinement off (sandbox/launcher.py), for a machine where it gets in
# the way.
# A PASS of the project's judge carries this (run_bench): only such a verdict is checked again in a user's process.
JUDGED_BY = "judged_by"
# The judge's process (autokernel/judge/bench.py; bench.py in the layout is its door for people).
JUDGE_MODULE = "autokernel.judge.bench"
# A test's stand-in for the judge: a script run by its path in the judge's place (tests/fake_judge.py); None, the
# package's judge. The parallel loop hands it to its judge workers with each task (JudgeTask.bench_script).
STAND_IN_JUDGE: Path | None = None
# How long a timed-out child gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 3.0
STDERR_LINES_IN_MESSAGE = 20
# The child's whole process tree may hold this share of the machine's memory.
MEMORY_SHARE = 0.5


class SandboxError(Exception):
    """The sandbox could not start a child at all (not the child's fault); the message says why."""


@dataclass
class ChildResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_seconds: float
    stopped: str | None = None                 # why the sandbox ended it early (memory cap, a signal)
    leftover_processes: int = 0                # processes it left running, killed after it ended
    peak_rss_mb: int | None = None
    sandbox: dict = field(default_factory=dict)   # the confinement it ran under

    def exit_description(self) -> str:
        """'exited with code 2', 'was killed by signal SIGSEGV (Segmentation fault)', 'was stopped: ...'."""
        if self.stopped and not self.timed_out:
            return f"was stopped by the sandbox ({self.stopped})"
        if self.returncode is None:
            return "ended without an exit status"
        if self.returncode < 0:
            number = -self.returncode
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            return f"was killed by signal {name} ({signal.strsignal(number) or 'unknown'})"
        return f"exited with code {self.returncode}"


def filesystem_confined() -> bool:
    """Whether children run under Landlock's file-system rules (sandbox/launcher.py), or only under the checks after
    them."""
    from autokernel.sandbox import landlock

    return os.environ.get(CONFINE_ENV, "1") != "0" and landlock.abi() >= 1


def default_memory_limit_mb() -> int:
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * MEMORY_SHARE / 2**20)


def _signal(pid: int | None, sig: signal.Signals, *, group: bool = False) -> None:
    if pid is None:
        return
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _StatusReader(threading.Thread):
    """Reads the launcher's JSON status lines from the pipe only it holds."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.messages: list[dict] = []

    def run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe:
            for line in pipe:
                with contextlib.suppress(ValueError):
                    self.messages.append(json.loads(line))

    def field(self, name: str, default=None):
        return next((m[name] for m in reversed(self.messages) if name in m), default)


def _stop(launcher: subprocess.Popen, status: _StatusReader) -> None:
    """Ask the launcher to kill its tree; past the grace period, kill the launcher, its tree and the child's group."""
    _signal(launcher.pid, signal.SIGTERM)
    try:
        launcher.wait(timeout=KILL_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        pass
    kill_tree(launcher.pid, within_s=1.0)
    _signal(launcher.pid, signal.SIGKILL)
    _signal(status.field("pid"), signal.SIGKILL, group=True)
    launcher.wait()


def run_child(cmd: Sequence[str], *, timeout_s: float, cwd: str | Path,
              env_extra: Mapping[str, str] | None = None, writable: Iterable[str | Path] = (),
              readable: Iterable[str | Path] = (), memory_limit_mb: int | None = None,
              pass_fds: Sequence[int] = (), echo: bool = False, on_line: Callable[[str], None] | None = None,
              hidden_in_repo: Sequence[str] = sandbox.HIDDEN_IN_REPO) -> ChildResult:
    """Run cmd in the sandbox (autokernel/sandbox/launcher.py) with a time limit; see the module docstring.

    The child gets a private temporary folder, with its compiler caches inside it (removed with it), and
    env_extra's variables (one set to None is left out);
    `writable` names folders it may write besides; `readable`, folders it may read even where the
    sandbox hides (a home folder); `pass_fds`, descriptors it inherits (no other process does, and
    this process keeps its copy: the caller closes it); `echo`, show its output here as it comes
    (stdout to stdout, stderr to stderr), or `on_line`, pass each line to it; `hidden_in_repo`, what it
    may not read below the working folder. The child and all it started are killed on timeout, when
    the caller is interrupted (Ctrl-C lands here while we wait), and after it exits.
    """
    scratch = tempfile.mkdtemp(prefix="autokernel-child-")
    caches = caches_in(Path(scratch) / "caches")
    # No bytecode written: an honest child leaves no .pyc, so integrity.py can treat any new one as planted.
    env = {**child_environment(), **caches, "TMPDIR": scratch, "TMP": scratch, "TEMP": scratch,
           "PYTHONDONTWRITEBYTECODE": "1", **(env_extra or {})}
    # The launcher and what it starts are modules of this package (paths.module_command): this copy of it, found
    # first; the sandbox lets the child read it (launcher.python_paths reads PYTHONPATH's folders).
    env["PYTHONPATH"] = paths.package_first(env.get("PYTHONPATH"))
    env = {name: value for name, value in env.items() if value is not None}     # None in env_extra: left out
    status_read, status_write = os.pipe()
    config = sandbox.SandboxConfig(
        command=list(cmd), parent_pid=os.getpid(), status_fd=status_write,
        memory_limit_mb=memory_limit_mb or default_memory_limit_mb(),
        writable=[scratch, *map(str, writable)], readable=list(map(str, readable)),
        confine_filesystem=filesystem_confined(), pass_fds=list(pass_fds), hidden_in_repo=list(hidden_in_repo))
    started = time.monotonic()
    status = _StatusReader(status_read)
    try:
        with undumpable():
            try:
                launcher = subprocess.Popen(paths.module_command(sandbox.__name__, sandbox.encode(config)),
                                            cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, pass_fds=(status_write, *pass_fds),
                                            start_new_session=True)
            except BaseException:
                os.close(status_read)
                raise
            finally:
                os.close(status_write)
            status.start()
            readers = [TailReader(launcher.stdout, _line_handler(sys.stdout if echo else None, on_line)),
                       TailReader(launcher.stderr, _line_handler(sys.stderr if echo else None, on_line))]
            for reader in readers:
                reader.start()
            timed_out = False
            try:
                launcher.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(launcher, status)
            except BaseException:
                _stop(launcher, status)
                raise
            finally:
                # A grandchild that escaped every net could still hold the pipes open: hence the join limit.
                for reader in readers + [status]:
                    reader.join(timeout=KILL_GRACE_S)
    finally:
        remove_tree(scratch)
    if status.field("error"):
        raise SandboxError(status.field("error"))
    finished = status.field("returncode", "missing") != "missing"
    return ChildResult(
        returncode=status.field("returncode") if finished else launcher.returncode,
        stdout=readers[0].text(), stderr=readers[1].text(), timed_out=timed_out,
        wall_seconds=time.monotonic() - started,
        stopped=status.field("stopped") if finished or timed_out else "the sandbox launcher itself was killed",
        leftover_processes=status.field("leftover_processes", 0) if finished else 0,
        peak_rss_mb=status.field("peak_rss_mb"),
        sandbox={**status.field("landlock", {}), "isolation": status.field("isolation"),
                 "proc": status.field("proc"), "shm": status.field("shm"), "missing": status.field("missing", [])})


def _line_handler(stream, on_line: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """What each line of a child's output goes to: the current watcher (the live view), and the caller's own."""
    handlers = [handler for handler in (current_watcher(), on_line) if handler is not None]
    if stream is not None:
        handlers.append(lambda line: print(line, file=stream, flush=True))
    if not handlers:
        return None
    return lambda line: [handler(line) for handler in handlers]


def synthesized_result(correctness: str, message: str, *, kernel_type: str | None = None,
                       dtype: str | None = None, seed: int | None = None,
                       wall_seconds: float | None = None) -> BenchResult:
    """The result for a run that produced none (TIMEOUT or CRASH), or a verdict the loop gives itself."""
    return BenchResult(kernel_type=kernel_type, correctness=correctness, message=message, dtype=dtype, seed=seed,
                       wall_seconds=wall_seconds, timings_meaningful=False)


def last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def bench_command(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, result_fd: int | None = None,
                  seed: int | None = None, extra_args: Sequence[str] = (),
                  bench_script: str | Path | None = None) -> list[str]:
    """The judge's command line: its module, or the stand-in script bench_script names (a test's)."""
    judge = [sys.executable, str(bench_script)] if bench_script else paths.module_command(JUDGE_MODULE)
    cmd = [*judge, "--kernel", str(kernel_path)]
    for shape in shapes:
        cmd += ["--shape", format_shape(shape)]
    cmd += ["--dtype", dtype]
    if result_fd is not None:
        cmd += ["--result-fd", str(result_fd)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra_args)


class _VerdictReader(threading.Thread):
    """Reads what the judge writes on the verdict pipe (it alone holds the write end) until it ends."""

    LIMIT_BYTES = 64 << 20

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.chunks: list[bytes] = []
        self.size = 0

    def run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                if self.size < self.LIMIT_BYTES:
                    self.chunks.append(chunk)
                self.size += len(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace") if self.size <= self.LIMIT_BYTES else ""


def run_bench(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, timeout_s: float,
              seed: int | None = None, extra_args: Sequence[str] = (),
              bench_script: str | Path | None = None, readable: Iterable[str | Path] = ()) -> BenchResult:
    """Judge one kernel file with the judge (bench_script: a test's stand-in for it) in a child process; its result.

    A bench run that times out becomes correctness TIMEOUT; one that dies without a verdict (a
    syntax error that kills the import, a segfault, an out-of-memory kill) becomes CRASH with the
    end of its stderr in "message". So does a verdict without this run's nonce, one that says PASS
    while bench.py exited otherwise, and any run that left a process behind. What looks like a secret in the
    message (the candidate's words) is taken out before the loop saves or sends it (autokernel/sandbox/redact.py).
    """
    result = _judged_run(kernel_path, shapes, dtype, timeout_s, seed, extra_args, bench_script, readable)
    result.message = redact.scrub(result.message, paths.ROOT)
    return result


def _judged_run(kernel_path, shapes, dtype, timeout_s, seed, extra_args, bench_script, readable) -> BenchResult:
    # The judge runs from the project it judges; a stand-in named here runs from its own folder.
    bench_script = bench_script or STAND_IN_JUDGE
    cwd = Path(bench_script).parent if bench_script else paths.ROOT
    # The judge reports what it compiled; a judge that does (the package's, not a test's stand-in) must, every time.
    the_judge = judge_files.reports_its_sources(Path(bench_script)) if bench_script else True
    # The judge's files: the package, and the door in the layout (bench.py, a person's way in) or the stand-in.
    # The first bench of this process takes the digest: the run's start.
    digest = judge_files.digest_of(Path(bench_script or paths.BENCH_SCRIPT))
    nonce = secrets.token_hex(16)
    # The candidate's own compiler caches and temporary folder, apart from the judge's
    # (autokernel/judge/candidate/worker_process.py).
    candidate_caches = caches_for(kernel_path) if Path(kernel_path).is_file() else None
    worker_env = {WORKER_CACHE_VARIABLE: str(candidate_caches)} if candidate_caches else {}
    verdict_read, verdict_write = os.pipe()
    verdict = _VerdictReader(verdict_read)
    verdict.start()
    try:
        cmd = bench_command(kernel_path, shapes=shapes, dtype=dtype, result_fd=verdict_write, seed=seed,
                            extra_args=extra_args, bench_script=bench_script)
        # Made readable, never writable: the region files the judge reads a region's reference from (regions/store.py,
        # in the workspace the sandbox hides), and the GPU timing lock its timing stage holds (core/gpu_lock.py).
        lock = [Path(os.environ[TIMING_LOCK_VARIABLE])] if os.environ.get(TIMING_LOCK_VARIABLE) else []
        readable = [*readable, *(folder for folder in region_store.folders() if folder.is_dir()), *lock]
        child = run_child(cmd, timeout_s=timeout_s, cwd=cwd, readable=readable, pass_fds=(verdict_write,),
                          writable=[candidate_caches] if candidate_caches else [],
                          env_extra={NONCE_VARIABLE: nonce, **worker_env})
    finally:
        os.close(verdict_write)
    # Every process of the run is dead (run_child returns after the sandbox killed them): the pipe ends here.
    verdict.join(timeout=KILL_GRACE_S)
    written = "" if verdict.is_alive() else verdict.text()
    common = dict(dtype=dtype, seed=seed, wall_seconds=round(child.wall_seconds, 3))
    tampered = digest.changed()
    if tampered:
        digest.restore(tampered)
        if candidate_caches:
            remove_tree(str(candidate_caches))
        return synthesized_result(CRASH, f"the judge's own files changed during the bench ({', '.join(tampered[:5])}); "
                                           "they were put back, and the verdict is void", **common)
    judged = _judged(written, child, nonce, dtype=dtype, seed=seed, timeout_s=timeout_s)
    if candidate_caches and (not judged.passed or outgrown(candidate_caches)):
        # Nothing a rejected candidate wrote outlives its experiment, nor more than compiler caches of a passing one.
        remove_tree(str(candidate_caches))
    sources = judged.extra.pop(judge_files.JUDGE_SOURCES, None)
    if (the_judge or sources is not None) and judged.correctness in (PASS, FAIL):
        unknown = digest.unknown_sources(sources)
        if unknown:
            return synthesized_result(CRASH, "the judge that ran is not the run's: its process compiled "
                                               f"{', '.join(unknown[:5])}, which the run's digest does not have", **common)
    if sources is not None and judged.passed:
        judged.extra[JUDGED_BY] = "bench.py"     # the project's judge, its sources checked (a test's stand-in is not)
    return judged


def _judged(written: str, child: ChildResult, nonce: str, *, dtype: str, seed: int | None,
            timeout_s: float) -> BenchResult:
    """The verdict bench.py sent, or the CRASH or TIMEOUT that stands for it."""
    common = dict(dtype=dtype, seed=seed, wall_seconds=round(child.wall_seconds, 3))
    if child.timed_out:
        return synthesized_result(TIMEOUT, f"bench.py ran past its {timeout_s:g} s limit and was killed",
                                  **common)
    if child.leftover_processes:
        return synthesized_result(CRASH, f"the kernel left {child.leftover_processes} process(es) running after the "
                                           "judge finished; they were killed, and the verdict is void: everything "
                                           "kernel_fn or its import starts must end before bench.py does", **common)
    try:
        result = json.loads(written)
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = last_lines(child.stderr, STDERR_LINES_IN_MESSAGE) or last_lines(child.stdout, STDERR_LINES_IN_MESSAGE)
        return synthesized_result(CRASH, f"bench.py {child.exit_description()} without a result:\n{tail}",
                                  **common)
    if result.pop("nonce", None) != nonce:
        return synthesized_result(CRASH, "the verdict was not written by the judge (it lacks this run's "
                                           f"nonce); bench.py exited with code {child.returncode}", **common)
    try:
        judged = BenchResult.from_json(result)
    except ContractError as exc:
        return synthesized_result(CRASH, f"bench.py wrote a result that is not one ({exc})", **common)
    if judged.passed and child.returncode != 0:
        return synthesized_result(CRASH, f"the result says PASS but bench.py exited with code {child.returncode}",
                                  **common)
    if child.stopped and judged.passed:       # the memory cgroup killed a process of the run
        return synthesized_result(CRASH, f"the sandbox stopped a process of the run ({child.stopped})", **common)
    if child.stopped:
        judged.message = f"{judged.message or ''} (the sandbox: {child.stopped})".strip()
    if judged.wall_seconds is None:
        judged.wall_seconds = common["wall_seconds"]
    return judged
