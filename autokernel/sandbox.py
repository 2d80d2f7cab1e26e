"""The sandbox launcher: the small process that stands between the loop and candidate code.

runner.run_child starts `python -m autokernel.sandbox CONFIG` with the child's (allow-listed)
environment; this launcher then
  - dies with the loop (PR_SET_PDEATHSIG), and on its way out kills everything below it;
  - becomes a child subreaper, so every process the candidate starts, even one that left for a
    session of its own, stays below it and is killed when the command ends;
  - is not dumpable, so the candidate can neither read its /proc entries nor trace it;
  - starts the command in a session of its own, with no capabilities (a root user gives up its
    own), no core dumps, PR_SET_PDEATHSIG on itself, and a Landlock ruleset (autokernel/landlock.py)
    that hides the user's home and the repository's .git/ and workspace/, allows writes only to a
    private temporary folder and the compiler caches, and denies TCP and signals out of the sandbox;
  - caps the memory of the whole process tree (resident set, polled) and kills it past the cap;
  - reports on a pipe the loop gave it and the command never sees: the command's pid, then its
    exit status, why it was stopped, and how many leftover processes it killed.
Only the standard library is imported here: the launcher starts for every bench run.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autokernel import landlock

POLL_S = 0.05
KILL_ROUNDS_S = 5.0          # how long the launcher keeps killing a tree that keeps forking
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER = 1, 4, 24, 36
_CAPABILITY_VERSION_3 = 0x20080522
# Repository entries a candidate has no business reading: git's config and objects, the run's state.
HIDDEN_IN_REPO = (".git", "workspace")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class SandboxConfig:
    command: list[str]
    parent_pid: int                          # the loop: the launcher exits at once if it is already gone
    status_fd: int
    memory_limit_mb: int | None = None
    writable: list[str] = field(default_factory=list)
    readable: list[str] = field(default_factory=list)   # allowed even inside a hidden area
    hidden: list[str] = field(default_factory=list)     # unreadable, beside HOME, /home and /root
    confine_filesystem: bool = True


# ---------------------------------------------------------------------- process trees (also used by runner.py)
def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process visible in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(name)] = (int(fields[1]), fields[0].decode())
    return table


def descendants(root: int, table: dict[int, tuple[int, str]] | None = None) -> list[int]:
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def resident_bytes(pids) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            pass
    return total


def kill_tree(root: int, *, keep_zombie: int | None = None, within_s: float = KILL_ROUNDS_S) -> int:
    """SIGKILL every live process below root, round after round until none is left; returns how many.

    Zombies reparented to this process are reaped on the way, except `keep_zombie` (a Popen's own child).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        table = process_table()
        live = [pid for pid in descendants(root, table) if table[pid][1] not in "ZX"]
        if not live:
            break
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        _reap_orphans(keep_zombie)
        time.sleep(0.01)
    return len(killed)


def _reap_orphans(keep: int | None = None) -> None:
    """Collect the zombies of processes that were reparented to this one (never `keep`, which Popen waits for)."""
    me = os.getpid()
    for pid, (ppid, state) in process_table().items():
        if ppid == me and state == "Z" and pid != keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


# ---------------------------------------------------------------------- what the candidate may read and write
def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def cover(targets, hidden, listed: list[str] | None = None) -> list[str]:
    """Paths whose subtrees together hold everything under `targets` except the `hidden` subtrees.

    `listed` collects the folders that hold a hidden subtree (the repository's root, "/"): they get
    no rule of their own, so the caller may allow listing them (names only, no file contents);
    without it Python cannot find a package by the folder on its path (bench.py's autokernel/).
    """
    hidden = [Path(os.path.realpath(h)) for h in hidden]
    rules: list[str] = []

    def visit(path: Path) -> None:
        # A rule follows symlinks, so a link is judged by where it leads (pytest's *current links, /bin -> usr/bin).
        path = Path(os.path.realpath(path))
        if any(_is_within(path, h) for h in hidden):
            return
        if not any(_is_within(h, path) for h in hidden):
            rules.append(str(path))
            return
        if listed is not None:
            listed.append(str(path))
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            visit(Path(entry.path))

    for target in targets:
        if os.path.exists(target):
            visit(Path(os.path.realpath(target)))
    return rules


def private_areas(cwd: str, hidden: list[str]) -> list[str]:
    home = os.path.realpath(os.path.expanduser("~"))
    areas = ["/home", "/root"] + ([home] if home != "/" else [])
    return areas + [os.path.join(cwd, name) for name in HIDDEN_IN_REPO] + list(hidden)


def python_paths() -> list[str]:
    """Where the interpreter and the packages bench.py imports live (allowed even inside a home)."""
    import importlib.util

    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    found.update(entry for entry in sys.path if entry and os.path.isabs(entry))
    for package in ("torch", "triton", "numpy"):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            found.add(os.path.dirname(location))
    return sorted(found)


def build_ruleset(config: SandboxConfig, cwd: str) -> landlock.Ruleset | None:
    version = landlock.abi()
    if not config.confine_filesystem or version < 1:
        return None
    ruleset = landlock.Ruleset(version)
    repo_hidden = [os.path.join(cwd, name) for name in HIDDEN_IN_REPO] + config.hidden
    listed: list[str] = []
    # A folder named readable inside a hidden one (the workspace's regions/, which the judge reads) is
    # readable itself, and nothing else of the hidden folder.
    hidden_real = [Path(os.path.realpath(h)) for h in repo_hidden]
    inside_hidden = [str(Path(os.path.realpath(p))) for p in config.readable
                     if os.path.exists(p) and any(_is_within(Path(os.path.realpath(p)), h) for h in hidden_real)]
    others = [p for p in config.readable if str(Path(os.path.realpath(p))) not in inside_hidden]
    readable = (cover(["/"], private_areas(cwd, config.hidden))
                + cover([cwd, *python_paths(), *others], repo_hidden, listed) + inside_hidden)
    ruleset.allow(readable, landlock.READ)
    # The repository's root (and the folders above a hidden one in it) may be listed, not read:
    # Python finds bench.py's own package, autokernel/, by listing the folder bench.py is in.
    ruleset.allow(listed, landlock.READ_DIR)
    ruleset.allow(config.writable, landlock.READ | landlock.write_rights(version))
    # The GPU's device files and /dev/null must be writable; creating files under /dev (/dev/shm) is not.
    ruleset.allow(["/dev"], landlock.READ | landlock.WRITE_FILE | landlock.TRUNCATE)
    if gpu_device_files():
        # CUDA's initialisation names its threads through /proc/self/task/<tid>/comm and fails
        # (cudaGetDeviceCount error 304) when it cannot (measured on an H100, Landlock ABI 7): the
        # judge then ran in Triton's interpreter on a GPU machine. A new process's /proc entries are
        # beneath no rule that can be made in advance, so /proc as a whole may be written, never
        # created in. As an ordinary user that reaches only the candidate's own entries; a root
        # user's candidate could write root-only files such as /proc/sysrq-trigger (the README says:
        # do not run the loop as root).
        ruleset.allow(["/proc"], landlock.READ | landlock.WRITE_FILE | landlock.TRUNCATE)
    return ruleset


def gpu_device_files() -> list[str]:
    """The NVIDIA device files of this machine (none on a machine without an NVIDIA GPU)."""
    try:
        return sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    except OSError:
        return []


# ---------------------------------------------------------------------- the launcher
def _drop_capabilities() -> None:
    """A root user's candidate must not keep root's powers (reading any /proc entry, above all)."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)   # fails harmlessly without CAP_SETPCAP
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _confine(ruleset: landlock.Ruleset | None):
    def confine() -> None:          # runs in the child, between fork and exec
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _drop_capabilities()
        if ruleset is not None:
            ruleset.restrict_self()
    return confine


class _Launcher:
    def __init__(self, config: SandboxConfig):
        self.config = config
        self.stop_signal: int | None = None

    def report(self, **fields) -> None:
        os.write(self.config.status_fd, (json.dumps(fields) + "\n").encode())

    def on_signal(self, signum, frame) -> None:
        self.stop_signal = signum

    def run(self) -> int:
        config = self.config
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != config.parent_pid:
            return 1                                   # the loop died before we could watch for it
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        cwd = os.getcwd()
        try:
            ruleset = build_ruleset(config, cwd)
            child = subprocess.Popen(config.command, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_confine(ruleset))
        except (OSError, subprocess.SubprocessError) as exc:
            self.report(error=f"the sandbox could not start the command: {exc}")
            return 1
        features = ruleset.features if ruleset else {"filesystem": False}
        if ruleset:
            ruleset.close()
        self.report(pid=child.pid, landlock=features)
        stopped, peak = self.watch(child)
        leftovers = kill_tree(os.getpid(), keep_zombie=child.pid)
        returncode = child.wait()
        _reap_orphans()
        self.report(returncode=returncode, stopped=stopped, peak_rss_mb=round(peak / 2**20),
                    leftover_processes=leftovers)
        return 0

    def watch(self, child: subprocess.Popen) -> tuple[str | None, int]:
        """Wait for the child; kill the whole tree on a stop signal or past the memory cap."""
        limit = self.config.memory_limit_mb
        peak = 0
        while child.poll() is None:
            if self.stop_signal is not None:
                kill_tree(os.getpid(), keep_zombie=child.pid)
                return f"signal {signal.Signals(self.stop_signal).name}", peak
            rss = resident_bytes(descendants(os.getpid()))
            peak = max(peak, rss)
            if limit and rss > limit * 2**20:
                kill_tree(os.getpid(), keep_zombie=child.pid)
                return f"memory: the process tree used {rss / 2**20:.0f} MiB, over its {limit} MiB cap", peak
            _reap_orphans(keep=child.pid)
            time.sleep(POLL_S)
        return None, peak


def main(argv: list[str] | None = None) -> int:
    raw = json.loads((argv or sys.argv[1:])[0])
    return _Launcher(SandboxConfig(**raw)).run()


def encode(config: SandboxConfig) -> str:
    return json.dumps(asdict(config))


if __name__ == "__main__":
    sys.exit(main())
