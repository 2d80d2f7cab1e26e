"""The sandbox launcher: the small process that stands between the loop and candidate code.

runner.run_child starts `python -m autokernel.sandbox.launcher CONFIG` with the child's (allow-listed)
environment; this launcher then
  - dies with the loop (PR_SET_PDEATHSIG), and on its way out kills everything below it;
  - puts the command in a PID namespace of its own where the machine allows one
    (autokernel/sandbox/namespaces.py): when the command ends, the launcher counts what it left running
    and kills the namespace's init, and Linux kills every process inside, however it tried to
    escape (setsid, a double fork, a cleared parent-death signal);
  - becomes a child subreaper, so where there is no namespace every process the candidate starts,
    even one that left for a session of its own, still stays below it and is killed, round after
    round, when the command ends (autokernel/sandbox/process_tree.py);
  - is not dumpable, so the candidate can neither read its /proc entries nor trace it;
  - starts the command in a session of its own, with no capabilities (a root user gives up its
    own), no core dumps, PR_SET_PDEATHSIG on itself, and a Landlock ruleset (autokernel/sandbox/landlock.py)
    that hides the user's home and the repository's .git/ and workspace/, allows writes only to a
    private temporary folder, the compiler caches and (on a GPU machine) a /dev/shm of the namespace's
    own, and denies TCP and signals out of the sandbox (with the file rules turned off, the TCP and
    signal rules stay);
  - moves itself, before it starts anything, into a network namespace (no socket reaches a process
    outside: UDP to 127.0.0.1, abstract Unix sockets) and an IPC namespace (System V shared memory and
    queues die with the run) of its own (autokernel/sandbox/namespaces.py), and starts the command with a
    socket filter (autokernel/sandbox/sockets.py: no Unix socket named by a path, no VSOCK), with agents'
    socket folders unreadable besides;
  - passes the command the descriptors it is given (the judge's verdict pipe) and keeps no copy;
  - caps the memory of the whole process tree: a memory cgroup of its own where one can be had
    (autokernel/sandbox/memory_group.py: every page counts, a memfd's too), and the resident set, polled;
    past either cap the tree is killed;
  - reports every one of these protections the machine cannot give ("missing"), with why;
  - reports on a pipe the loop gave it and the command never sees: the command's pid, then its
    exit status, why it was stopped, and how many processes it left running.
Only the standard library is imported here: the launcher starts for every bench run.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autokernel.sandbox import confinement, landlock, namespaces
from autokernel.sandbox.confinement import gpu_device_files
from autokernel.sandbox.process_tree import descendants, kill_tree, live_descendants, reap_orphans, resident_bytes

POLL_S = 0.05
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36
# Repository entries a candidate has no business reading: git's config and objects, the run's state.
HIDDEN_IN_REPO = (".git", "workspace")

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
    pass_fds: list[int] = field(default_factory=list)   # inherited by the command alone (the verdict's pipe)
    hidden_in_repo: list[str] = field(default_factory=lambda: list(HIDDEN_IN_REPO))   # below the working folder


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


def private_areas(cwd: str, hidden: list[str], in_repo=HIDDEN_IN_REPO) -> list[str]:
    home = os.path.realpath(os.path.expanduser("~"))
    areas = ["/home", "/root"] + ([home] if home != "/" else [])
    return areas + agent_folders() + [os.path.join(cwd, name) for name in in_repo] + list(hidden)


def agent_folders() -> list[str]:
    """Where agents keep their sockets and the session its secrets: ssh-agent's /tmp/ssh-*/, the user's runtime folder
    (gpg-agent, the keyring, the desktop's bus). Unreadable, besides the socket filter that refuses Unix sockets."""
    import glob

    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return sorted(glob.glob("/tmp/ssh-*")) + [runtime]


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
    if version < 1:
        return None
    if not config.confine_filesystem:
        # Files are left alone, the network and other processes' signals are not (where the kernel can).
        return landlock.Ruleset(version, handled_fs=0) if version >= 4 else None
    ruleset = landlock.Ruleset(version)
    repo_hidden = [os.path.join(cwd, name) for name in config.hidden_in_repo] + config.hidden
    listed: list[str] = []
    # A folder named readable inside a hidden one (the workspace's regions/, which the judge reads) is
    # readable itself, and nothing else of the hidden folder.
    hidden_real = [Path(os.path.realpath(h)) for h in repo_hidden]
    inside_hidden = [str(Path(os.path.realpath(p))) for p in config.readable
                     if os.path.exists(p) and any(_is_within(Path(os.path.realpath(p)), h) for h in hidden_real)]
    others = [p for p in config.readable if str(Path(os.path.realpath(p))) not in inside_hidden]
    readable = (cover(["/"], private_areas(cwd, config.hidden, config.hidden_in_repo))
                + cover([cwd, *python_paths(), *others], repo_hidden, listed) + inside_hidden)
    ruleset.allow(readable, landlock.READ)
    # The repository's root (and the folders above a hidden one in it) may be listed, not read:
    # Python finds bench.py's own package, autokernel/, by listing the folder bench.py is in.
    ruleset.allow(listed, landlock.READ_DIR)
    ruleset.allow(config.writable, landlock.READ | landlock.write_rights(version))
    # The GPU's device files and /dev/null must be writable; creating files under /dev is not (the machine's /dev/shm
    # included: the namespace's init mounts one of its own where it may, allow_new_mounts).
    ruleset.allow(["/dev"], landlock.READ | landlock.WRITE_FILE | landlock.TRUNCATE)
    allow_proc(ruleset)
    return ruleset


def allow_new_mounts(ruleset: landlock.Ruleset, mounted: list[str]) -> None:
    """Rules for what the namespace's init mounted after the ruleset was made (namespaces.mount_private).

    A rule holds the object its path named when it was added, so the rules for the machine's /proc and /dev/shm do
    not cover the ones mounted over them. The namespace's own /dev/shm may be written and created in: a tmpfs of 64 MiB,
    nosuid, nodev and noexec, that only this run's processes see and that ends with them. The rest of /dev stays as
    build_ruleset made it: its files writable, nothing creatable (a file made in /dev/shm cannot be renamed or linked
    out of it either: that needs the right to make it where it lands). Unmounting it to reach the machine's /dev/shm
    takes a capability the command has dropped, and Landlock refuses any mount or unmount to a confined process.
    """
    if "/proc" in mounted:
        allow_proc(ruleset)
    if "/dev/shm" in mounted:
        ruleset.allow(["/dev/shm"], landlock.READ | landlock.write_rights(ruleset.version))


def allow_proc(ruleset: landlock.Ruleset) -> None:
    """/proc's rule: read, and on a GPU machine write (allow_new_mounts makes it again for the namespace's /proc).

    CUDA's initialisation names its threads through /proc/self/task/<tid>/comm and fails
    (cudaGetDeviceCount error 304) when it cannot (measured on an H100, Landlock ABI 7): the judge
    then ran in Triton's interpreter on a GPU machine. A new process's /proc entries are beneath no
    rule that can be made in advance, so /proc as a whole may be written, never created in. As an
    ordinary user that reaches only the candidate's own entries; a root user's candidate could write
    root-only files such as /proc/sysrq-trigger (the README says: do not run the loop as root).
    """
    ruleset.allow(["/proc"], landlock.READ | (landlock.WRITE_FILE | landlock.TRUNCATE if gpu_device_files() else 0))


class _Launcher:
    def __init__(self, config: SandboxConfig):
        self.config = config
        self.stop_signal: int | None = None
        self.init_pid: int | None = None       # the namespace's init, where there is a namespace

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
        self.group = None
        try:
            # First, while no candidate runs yet: an ordinary user maps its ids through its own /proc
            # entries, which a process that is not dumpable cannot write.
            namespace = namespaces.enter_pid_namespace()
            given = confinement.isolate(config.memory_limit_mb)
            self.group, missing = given.group, given.missing
            _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            ruleset = build_ruleset(config, os.getcwd())
            self.confine = confinement.confine(ruleset, address_space_mb=given.address_space_mb,
                                               filter_sockets=given.filter_sockets)
            if self.group is not None:
                self.group.join()           # the command and all it starts are charged to the group
            try:
                root, command_ended = self.start(ruleset, namespace)
            finally:
                if self.group is not None:
                    self.group.leave()
        except (OSError, subprocess.SubprocessError) as exc:
            self.report(error=f"the sandbox could not start the command: {exc}")
            self.remove_group()
            return 1
        finally:
            for fd in config.pass_fds:
                os.close(fd)        # the command's alone: a copy here would keep the verdict's pipe open
        if root is None:
            self.remove_group()
            return 1
        features = ruleset.features if ruleset else {"filesystem": False}
        if ruleset:
            ruleset.close()
        self.report(landlock=features, isolation=namespace.describe(), missing=missing)
        stopped, peak, returncode = self.watch(root, command_ended)
        # Whatever still runs once the command has ended was left behind: counted, then killed.
        leftovers = len(live_descendants(os.getpid(), besides=(root.pid,) if self.init_pid else ()))
        self.end_everything(root)
        if self.group is not None and self.group.oom_kills() and stopped is None:
            stopped = (f"memory: the process tree reached its {config.memory_limit_mb} MiB cap (counted by its memory "
                       "cgroup, memory held in files such as a memfd included) and was killed")
        self.remove_group()
        self.report(returncode=returncode, stopped=stopped, peak_rss_mb=round(peak / 2**20),
                    leftover_processes=leftovers)
        return 0

    def remove_group(self) -> None:
        if self.group is not None:
            self.group.remove()

    def start(self, ruleset, namespace: namespaces.Namespace):
        """The launcher's one child (the namespace's init, or the command itself) and how to learn the command ended."""
        config = self.config
        shm_off = confinement.private_shm_problem()
        if namespace.kind is None:
            child = subprocess.Popen(config.command, stdin=subprocess.DEVNULL, start_new_session=True,
                                     pass_fds=config.pass_fds, preexec_fn=self.confine)
            self.report(pid=child.pid, shm=shm_off or "no PID namespace, so no mount namespace of its own")
            return child, lambda: child.poll()
        read_end, write_end = os.pipe()
        lifeline_read, self.lifeline = os.pipe()      # the launcher's end lives (and dies) with it
        pid = os.fork()
        if pid == 0:                      # the namespace's init
            os.close(read_end)
            os.close(self.lifeline)
            namespaces.run_init(config.command, pass_fds=config.pass_fds, preexec_fn=self.confine,
                                report_fd=write_end, lifeline_fd=lifeline_read, private_shm=not shm_off,
                                allow_new_mounts=functools.partial(allow_new_mounts, ruleset) if ruleset else None)
        os.close(write_end)
        os.close(lifeline_read)
        self.init_pid = pid
        init = _InitChild(pid, read_end)
        message = init.next_message()
        if "error" in message or "pid" not in message:
            self.report(error=message.get("error", "the namespace's init ended before it started the command"))
            self.end_everything(init)
            return None, None
        # The pid the command has outside the namespace is the init's one child: the runner may need it to kill.
        self.report(pid=pid, proc=init.proc_note, shm=init.shm_note or shm_off)
        return init, init.returncode

    def watch(self, root, command_ended) -> tuple[str | None, int, int | None]:
        """Wait for the command; kill the whole tree on a stop signal or past the memory cap."""
        limit = self.config.memory_limit_mb
        peak = 0
        while (returncode := command_ended()) is None:
            if self.stop_signal is not None:
                self.end_everything(root)
                return f"signal {signal.Signals(self.stop_signal).name}", peak, command_ended()
            rss = resident_bytes(descendants(os.getpid()))
            peak = max(peak, rss)
            if limit and rss > limit * 2**20:
                self.end_everything(root)
                return (f"memory: the process tree used {rss / 2**20:.0f} MiB, over its {limit} MiB cap", peak,
                        command_ended())
            reap_orphans(keep=root.pid)
            time.sleep(POLL_S)
        return None, peak, returncode

    def end_everything(self, root) -> None:
        """Kill the command and all it started; return once they are gone."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)      # the kernel kills the whole namespace with it
        kill_tree(os.getpid(), keep_zombie=None if self.init_pid else root.pid)
        root.wait()
        reap_orphans()


class _InitChild:
    """The namespace's init as the launcher sees it: its messages, and the command's exit status."""

    def __init__(self, pid: int, read_end: int):
        self.pid = pid
        self.stream = os.fdopen(read_end, "rb", buffering=0)
        self.proc_note = ""
        self.shm_note = ""          # "" where the init was not asked for a /dev/shm of its own
        self.exit_code: int | None = None
        self.done = False

    def next_message(self) -> dict:
        while True:
            line = self.stream.readline()
            if not line:
                return {}
            message = json.loads(line)
            if "proc" in message:
                self.proc_note = message["proc"] or "a /proc of its own"
                if "shm" in message:
                    self.shm_note = message["shm"] or "a /dev/shm of its own"
                continue
            return message

    def returncode(self) -> int | None:
        """The command's exit status once the init has reported it (None while it runs)."""
        if not self.done and select.select([self.stream], [], [], 0)[0]:
            self._take_end()
        return self.exit_code if self.done else None

    def _take_end(self) -> None:
        message = self.next_message()
        self.done = True
        # An init that died without a word (killed with its namespace) leaves the command killed too.
        self.exit_code = message.get("returncode", -signal.SIGKILL)

    def wait(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        if not self.stream.closed:
            if not self.done:
                self._take_end()        # the init has ended: what it said is all there is
            self.stream.close()


def main(argv: list[str] | None = None) -> int:
    raw = json.loads((argv or sys.argv[1:])[0])
    return _Launcher(SandboxConfig(**raw)).run()


def encode(config: SandboxConfig) -> str:
    return json.dumps(asdict(config))


if __name__ == "__main__":
    sys.exit(main())
