"""The one place that runs candidate code: a child process in a sandbox, with a time limit and no secrets.

Everything that executes code an agent wrote (bench.py, whose worker imports kernel.py) goes through
`run_child`, which starts it under the sandbox launcher (autokernel/sandbox.py). So a kernel that
hangs, forks, leaves daemons in sessions of their own, eats memory, floods its output or reads its
environment cannot take the loop down, outlive the experiment, or leak a secret:
  - the child sees only an allow-list of environment variables (ALLOWED_ENV), and never one that
    looks like a credential, even on the list;
  - while it runs, this process is not dumpable, so /proc/<this pid>/environ and friends are
    closed to it (a root user's child gives up the capabilities that would open them);
  - it gets a private temporary folder, removed afterwards, and writes no Python bytecode;
  - it dies with this process, and every process it started dies with it.
`run_bench` wraps it for the judge and always returns a bench-shaped result dict, inventing a
TIMEOUT or CRASH result when bench.py could not write one.
"""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from autokernel import paths, sandbox
from autokernel.regions import store as region_store
from autokernel.child_output import TailReader, current_watcher
from autokernel.contracts import CRASH, TIMEOUT, BenchResult, ContractError
from autokernel.registry import Shape, format_shape

# run_bench puts a fresh secret in bench.py's environment there; bench.py takes it out before it starts the
# candidate's worker and writes it into its JSON result. A result file without it was not written by the judge.
from autokernel.worker_process import NONCE_VARIABLE

# What a child may see of the environment: what Python, the compilers and the GPU stack read.
ALLOWED_ENV = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONPATH", "PYTHONHASHSEED",
               "PYTHONUNBUFFERED", "PYTHONIOENCODING", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV",
               "LD_LIBRARY_PATH", "CC", "CXX", "XDG_CACHE_HOME"}
ALLOWED_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "CUBLAS_",
                        "CUDNN_", "HIP_", "ROCM_", "HSA_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "AUTOKERNEL_")
# Never passed on, even when the allow-list would: anything that looks like a credential.
SECRET_PATTERNS = ("ANTHROPIC_*", "OPENAI_*", "*_API_KEY", "*_TOKEN", "*SECRET*", "*PASSWORD*", "*CREDENTIAL*",
                   "*_KEY", "*PAT", "*AUTH*")
# Setting this to 0 turns the Landlock file-system confinement off (sandbox.py), for a machine where it gets in the way.
CONFINE_ENV = "AUTOKERNEL_SANDBOX_FS"
GPU_PROBE_TIMEOUT_S = 120
# How long a timed-out child gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 3.0
STDERR_LINES_IN_MESSAGE = 20
# The child's whole process tree may hold this share of the machine's memory.
MEMORY_SHARE = 0.5
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4



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


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of the environment, without anything that matches SECRET_PATTERNS (any case)."""
    env = dict(os.environ if base is None else base)
    return {name: value for name, value in env.items()
            if (name in ALLOWED_ENV or name.startswith(ALLOWED_ENV_PREFIXES))
            and not any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in SECRET_PATTERNS)}


def cache_environment() -> dict[str, str]:
    """Compiler caches the child may write (kept between runs, so kernels are not compiled anew each time)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autokernel"
    caches = {"TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR") or str(root / "triton"),
              "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(root / "inductor"),
              "CUDA_CACHE_PATH": os.environ.get("CUDA_CACHE_PATH") or str(root / "nv"),
              # CUDA C++ kernel files' builds (autokernel/cuda_build.py), compiled inside the sandbox.
              "AUTOKERNEL_CUDA_CACHE": os.environ.get("AUTOKERNEL_CUDA_CACHE") or str(root / "cuda")}
    for folder in caches.values():
        with contextlib.suppress(OSError):
            Path(folder).mkdir(parents=True, exist_ok=True)
    return caches


def filesystem_confined() -> bool:
    """Whether children run under Landlock's file-system rules (sandbox.py), or only under the checks after them."""
    from autokernel import landlock

    return os.environ.get(CONFINE_ENV, "1") != "0" and landlock.abi() >= 1


def default_memory_limit_mb() -> int:
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * MEMORY_SHARE / 2**20)


_libc = ctypes.CDLL(None, use_errno=True)
_undumpable_depth = 0
_undumpable_lock = threading.Lock()


@contextlib.contextmanager
def undumpable():
    """While a child runs, this process's /proc entries (environ, mem, fd...) are closed to same-user processes."""
    global _undumpable_depth
    with _undumpable_lock:
        previous = _libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
        _undumpable_depth += 1
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    try:
        yield
    finally:
        with _undumpable_lock:
            _undumpable_depth -= 1
            if not _undumpable_depth and previous > 0:
                _libc.prctl(_PR_SET_DUMPABLE, previous, 0, 0, 0)


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
    sandbox.kill_tree(launcher.pid, within_s=1.0)
    _signal(launcher.pid, signal.SIGKILL)
    _signal(status.field("pid"), signal.SIGKILL, group=True)
    launcher.wait()


def _remove_tree(folder: str) -> None:
    def make_writable_and_retry(function, path, _exc_info):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
    shutil.rmtree(folder, onerror=make_writable_and_retry)


def run_child(cmd: Sequence[str], *, timeout_s: float, cwd: str | Path,
              env_extra: Mapping[str, str] | None = None, writable: Iterable[str | Path] = (),
              readable: Iterable[str | Path] = (), memory_limit_mb: int | None = None) -> ChildResult:
    """Run cmd in the sandbox (autokernel/sandbox.py) with a time limit; see the module docstring.

    `writable` names folders the child may write besides its private temporary folder and the
    compiler caches; `readable`, folders it may read even where the sandbox hides (a home folder). The child and all it started are killed on timeout, when the caller is
    interrupted (Ctrl-C lands here while we wait), and after it exits.
    """
    scratch = tempfile.mkdtemp(prefix="autokernel-child-")
    caches = cache_environment()
    # No bytecode written: an honest child leaves no .pyc, so integrity.py can treat any new one as planted.
    env = {**child_environment(), **caches, "TMPDIR": scratch, "TMP": scratch, "TEMP": scratch,
           "PYTHONDONTWRITEBYTECODE": "1", **(env_extra or {})}
    status_read, status_write = os.pipe()
    config = sandbox.SandboxConfig(
        command=list(cmd), parent_pid=os.getpid(), status_fd=status_write,
        memory_limit_mb=memory_limit_mb or default_memory_limit_mb(),
        writable=[scratch, *caches.values(), *map(str, writable)], readable=list(map(str, readable)),
        confine_filesystem=filesystem_confined())
    started = time.monotonic()
    status = _StatusReader(status_read)
    try:
        with undumpable():
            try:
                launcher = subprocess.Popen([sys.executable, "-m", "autokernel.sandbox", sandbox.encode(config)],
                                            cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, pass_fds=(status_write,), start_new_session=True)
            except BaseException:
                os.close(status_read)
                raise
            finally:
                os.close(status_write)
            status.start()
            watcher = current_watcher()
            readers = [TailReader(launcher.stdout, watcher), TailReader(launcher.stderr, watcher)]
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
        _remove_tree(scratch)
    if status.field("error"):
        raise SandboxError(status.field("error"))
    finished = status.field("returncode", "missing") != "missing"
    return ChildResult(
        returncode=status.field("returncode") if finished else launcher.returncode,
        stdout=readers[0].text(), stderr=readers[1].text(), timed_out=timed_out,
        wall_seconds=time.monotonic() - started,
        stopped=status.field("stopped") if finished or timed_out else "the sandbox launcher itself was killed",
        leftover_processes=status.field("leftover_processes", 0), peak_rss_mb=status.field("peak_rss_mb"),
        sandbox=status.field("landlock", {}))


def synthesized_result(correctness: str, message: str, *, kernel_type: str | None = None,
                       dtype: str | None = None, seed: int | None = None,
                       wall_seconds: float | None = None) -> dict:
    """A bench-shaped result (BenchResult's JSON) for a run that produced none (TIMEOUT or CRASH)."""
    return BenchResult(kernel_type=kernel_type, correctness=correctness, message=message, dtype=dtype, seed=seed,
                       wall_seconds=wall_seconds, timings_meaningful=False).to_json()


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])


def bench_command(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, json_out: str | Path,
                  seed: int | None = None, extra_args: Sequence[str] = (),
                  bench_script: str | Path | None = None) -> list[str]:
    cmd = [sys.executable, str(bench_script or paths.BENCH_SCRIPT), "--kernel", str(kernel_path)]
    for shape in shapes:
        cmd += ["--shape", format_shape(shape)]
    cmd += ["--dtype", dtype, "--json-out", str(json_out)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return cmd + list(extra_args)


GPU_PROBE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"


def sandbox_gpu_problem(cwd: str | Path) -> str | None:
    """Why the sandbox hides this machine's GPU from candidates, or None (also None with no GPU here).

    Without this check a sandbox that hides the GPU makes every bench run in Triton's interpreter:
    an H100 night of 8-second "timings" that mean nothing, each labelled as such but none failing.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    child = run_child([sys.executable, "-c", GPU_PROBE], timeout_s=GPU_PROBE_TIMEOUT_S, cwd=cwd)
    if child.returncode == 0:
        return None
    detail = _last_lines(child.stderr, 3) or child.exit_description()
    return ("this machine has a CUDA GPU, but a process in the candidates' sandbox cannot use it, so every "
            f"kernel would be judged in Triton's interpreter ({detail.strip()}). Set {CONFINE_ENV}=0 to run "
            "candidates without the file-system confinement (the other checks stay), and report this machine's "
            "kernel version and GPU driver")


def run_bench(kernel_path: str | Path, *, shapes: Iterable[Shape], dtype: str, timeout_s: float,
              seed: int | None = None, extra_args: Sequence[str] = (),
              bench_script: str | Path | None = None, readable: Iterable[str | Path] = ()) -> dict:
    """Judge one kernel file with bench.py in a child process and return bench's JSON result.

    A bench run that times out becomes correctness TIMEOUT; one that dies without writing its
    JSON (a syntax error that kills the import, a segfault, an out-of-memory kill) becomes CRASH
    with the end of its stderr in "message". So does a result file that lacks this run's nonce
    (the kernel wrote it, not the judge), or that says PASS while bench.py exited otherwise.
    """
    # The judge runs from the project it judges (in a clone, the folder bench.py is in); a judge named
    # here runs from its own folder.
    cwd = Path(bench_script).parent if bench_script else paths.ROOT
    bench_script = Path(bench_script or paths.BENCH_SCRIPT)
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="autokernel-bench-") as tmp:
        json_out = Path(tmp) / "result.json"
        cmd = bench_command(kernel_path, shapes=shapes, dtype=dtype, json_out=json_out, seed=seed,
                            extra_args=extra_args, bench_script=bench_script)
        # The region files the judge reads a region's reference from (autokernel/regions/store.py) sit in the
        # workspace, which the sandbox hides: they are made readable, never writable.
        readable = [*readable, *(folder for folder in region_store.folders() if folder.is_dir())]
        child = run_child(cmd, timeout_s=timeout_s, cwd=cwd, writable=[tmp], readable=readable,
                          env_extra={NONCE_VARIABLE: nonce})
        written = json_out.read_text() if json_out.exists() else ""
    common = dict(dtype=dtype, seed=seed, wall_seconds=round(child.wall_seconds, 3))
    if child.timed_out:
        return synthesized_result(TIMEOUT, f"bench.py ran past its {timeout_s:g} s limit and was killed",
                                  **common)
    try:
        result = json.loads(written)
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = _last_lines(child.stderr, STDERR_LINES_IN_MESSAGE) or _last_lines(child.stdout, STDERR_LINES_IN_MESSAGE)
        return synthesized_result(CRASH, f"bench.py {child.exit_description()} without a result:\n{tail}",
                                  **common)
    if result.pop("nonce", None) != nonce:
        return synthesized_result(CRASH, "the result file was not written by the judge (it lacks this run's "
                                           f"nonce); bench.py exited with code {child.returncode}", **common)
    try:
        judged = BenchResult.from_json(result)
    except ContractError as exc:
        return synthesized_result(CRASH, f"bench.py wrote a result that is not one ({exc})", **common)
    if judged.passed and child.returncode != 0:
        return synthesized_result(CRASH, f"the result says PASS but bench.py exited with code {child.returncode}",
                                  **common)
    if judged.wall_seconds is None:
        judged.wall_seconds = common["wall_seconds"]
    return judged.to_json()
