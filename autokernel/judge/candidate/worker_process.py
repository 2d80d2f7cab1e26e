"""Starting the candidate's worker process, early: this module imports nothing heavy.

bench.py calls start_early before its own imports, so the worker imports torch, Triton and the
kernel file while the judge imports its own (each takes about two seconds). The worker gets one
end of a socket pair as an inherited file descriptor and nothing else of the judge's: not its
environment's result nonce, which the judge takes out first, and not its memory or /proc entries,
closed by PR_SET_DUMPABLE. autokernel/judge/judge_link.py talks to the worker once it is started.

Under the runner, the worker also gets folders of its own: a temporary folder and the compiler caches
of its kernel source (sandbox/child_env.py, caches_for), never the judge's. Where Landlock confines files, the
worker gets one more layer of rules on top of the sandbox's, so it can write only there (and to
device files): the judge's own caches and its temporary folder, where it compiles torch.compile's
reference, are out of its reach, so nothing the candidate plants can run in the judge.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from autokernel.judge import source_check
from autokernel.sandbox import process_tree
from autokernel.sandbox.child_env import CACHE_FOLDERS

# runner.run_bench puts a fresh secret here; the judge takes it out before it starts the worker and writes it
# into its JSON result, so a result file that a kernel wrote (it can find the path) is told apart.
NONCE_VARIABLE = "AUTOKERNEL_RESULT_NONCE"
# The worker decides itself whether Triton runs interpreted (the one switch, first): it may start
# before the judge knows.
WORKER_CODE = ("import sys, torch\n"
               "from autokernel.core import interpreter\n"
               "if interpreter.choose():\n"
               "    torch.set_num_threads(1)\n"
               "from autokernel.judge.candidate.worker import main\n"
               "sys.exit(main())\n")

# runner.run_bench names the candidate's compiler-cache folder here (sandbox/child_env.py, caches_for).
WORKER_CACHE_VARIABLE = "AUTOKERNEL_WORKER_CACHE"
CONFINE_ENV = "AUTOKERNEL_SANDBOX_FS"     # 0 turns Landlock's file rules off

_sealed: dict = {}
_early: dict = {}
_refused: dict = {}          # kernel path -> why the source check refused it (its worker never started)
_checked: dict = {}          # kernel path -> the sha256 of the source the check passed (the worker imports those bytes)
_judges_own: dict = {}       # worker pid -> the judge's children from before it started that worker


def seal_judge() -> str | None:
    """Take the result nonce out of the environment, close this process to the worker, and make it the reaper of
    the worker's processes (idempotent).

    Without PR_SET_DUMPABLE a process of the same user can read this one's /proc entries (its
    initial environment, which held the nonce) and memory, or attach a debugger to it.
    """
    if "nonce" not in _sealed:
        _sealed["nonce"] = os.environ.pop(NONCE_VARIABLE, None)
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(4, 0)  # PR_SET_DUMPABLE, 0
            # PR_SET_CHILD_SUBREAPER: a process the worker starts stays below the judge even when its parent
            # leaves it (a double fork), so the judge sees every one (judge_link.CandidateWorker.strays).
            libc.prctl(36, 1)
    return _sealed["nonce"]


def start_worker(kernel_path: Path) -> tuple[subprocess.Popen, socket.socket]:
    """The worker process for kernel_path, and the judge's end of its socket pair."""
    seal_judge()
    judge_end, worker_end = socket.socketpair()
    env, writable = worker_environment()
    cmd = [sys.executable, "-c", WORKER_CODE, "--fd", str(worker_end.fileno()), "--kernel", str(kernel_path),
           "--parent", str(os.getpid())]
    digest = _checked.get(Path(kernel_path).resolve())
    if digest:
        cmd += ["--source-digest", digest]
    layer = _write_layer(writable) if writable else None
    before = set(process_tree.children(os.getpid()))
    try:
        proc = subprocess.Popen(cmd, pass_fds=(worker_end.fileno(),), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=layer.restrict_self if layer else None)
    finally:
        if layer:
            layer.close()
    worker_end.close()
    _judges_own[proc.pid] = before
    return proc, judge_end


def judges_own(worker_pid: int) -> set[int]:
    """The judge's children from before it started this worker: none of them is the candidate's
    (judge_link.CandidateWorker.strays; a test's process has children of its own)."""
    return set(_judges_own.get(worker_pid, ()))


def worker_environment() -> tuple[dict[str, str], list[str]]:
    """The worker's environment, and the folders it alone may write (none: no layer of its own)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}   # the kernel's prints arrive as they happen
    cache = os.environ.get(WORKER_CACHE_VARIABLE)
    if not cache:
        return env, []          # bench.py run by hand: the worker shares the judge's folders
    temporary = tempfile.mkdtemp(prefix="worker-")   # inside the judge's private TMPDIR, removed with it
    folders = {name: os.path.join(cache, sub) for name, sub in CACHE_FOLDERS.items()}
    for folder in folders.values():
        os.makedirs(folder, exist_ok=True)
    env.update(folders, TMPDIR=temporary, TMP=temporary, TEMP=temporary)
    env.pop(WORKER_CACHE_VARIABLE)
    return env, [temporary, cache]


def _write_layer(folders: list[str]):
    """A Landlock layer for the worker, stacked on the sandbox's: writing only under `folders` and to devices.

    Only writing is decided here: what the worker may read is the sandbox's rule already. Where files are not
    confined (the mode that gives that up), a layer that scopes signals alone, where the kernel can; else None."""
    from autokernel.sandbox import landlock

    version = landlock.abi()
    if version < 1:
        return None
    if os.environ.get(CONFINE_ENV, "1") == "0":
        # Files are left alone, but a layer of its own still keeps the worker's signals off the judge (its parent,
        # which it can name): without one it shares the judge's Landlock domain, and could stop or kill it.
        return landlock.Ruleset(version, handled_fs=0, deny_tcp=False) if version >= 6 else None
    writes = landlock.write_rights(version)
    ruleset = landlock.Ruleset(version, handled_fs=writes, deny_tcp=False)
    ruleset.allow(folders, writes)
    # Device files (/dev/null, the GPU's) and, on a GPU, /proc's thread names: as the sandbox allows them.
    ruleset.allow(["/dev", "/proc"], landlock.WRITE_FILE | landlock.TRUNCATE)
    return ruleset


def start_early(argv: list[str]) -> None:
    """Start the worker for the --kernel in bench.py's arguments now, if that file exists."""
    path = Path("kernel.py")
    for i, arg in enumerate(argv):
        if arg == "--kernel" and i + 1 < len(argv):
            path = Path(argv[i + 1])
        elif arg.startswith("--kernel="):
            path = Path(arg.split("=", 1)[1])
    if path.is_file():
        refusal = check_source(path)
        if refusal:
            _refused[path.resolve()] = refusal       # the kernel's code never runs: no worker
        else:
            _early[path.resolve()] = start_worker(path)


def check_source(kernel_path: Path) -> str | None:
    """Why the source check (autokernel/judge/source_check.py) refuses the kernel file, or None: it passed (the
    worker then checks that it imports those very bytes), the check is off (SOURCE_CHECK_ENV=0), or the file
    cannot be read as text (the worker's import says why)."""
    if os.environ.get(source_check.SOURCE_CHECK_ENV, "1") == "0":
        return None
    try:
        data = Path(kernel_path).read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        source_check.check(text, Path(kernel_path).name)
    except source_check.SourceRejected as rejected:
        return str(rejected)
    _checked[Path(kernel_path).resolve()] = hashlib.sha256(data).hexdigest()
    return None


def refusal_of(kernel_path: Path) -> str | None:
    """The source check's refusal of the kernel file bench.py judges, made before any worker started for it."""
    key = kernel_path.resolve()
    if key in _early:
        return None
    return _refused.get(key) or check_source(kernel_path)


def started_for(kernel_path: Path) -> tuple[subprocess.Popen, socket.socket]:
    """The worker started early for kernel_path, or a new one."""
    return _early.pop(kernel_path.resolve(), None) or start_worker(kernel_path)


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to kill this process when the judge dies, so a killed judge leaves no worker behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:
        os._exit(1)
