"""A PID namespace around the candidate: when its init dies, the kernel kills every process inside.

The sandbox launcher (autokernel/sandbox/launcher.py) asks for a new PID namespace before it starts the
command. The first process started after that is the namespace's init (pid 1 inside); `run_init`
is its whole life: it starts the command, reports its exit status, reaps orphans, and waits to be
killed. Once the launcher kills it, Linux kills everything left in the namespace, whatever it did
to escape: a process that called setsid(), double-forked, cleared its parent-death signal or
changed its process group cannot leave a PID namespace, and the launcher's wait for the init
returns only after all of them are gone (zap_pid_ns_processes). So "every process the candidate
started is dead" is a fact the kernel enforces, not the result of a walk over /proc that a fast
forker could outrun.

How the namespace is had, in order: a plain CLONE_NEWPID (root, or CAP_SYS_ADMIN); else a user
namespace with it (an ordinary user, where the kernel allows unprivileged user namespaces), mapping
the user's own uid and gid, so files, devices and getuid() look the same. Inside, the init mounts a
fresh /proc in a mount namespace of its own where it may (the candidate then sees only its own
processes, and /proc/self/task/<tid> matches the thread ids it knows: CUDA names its threads there);
where it may not, the candidate keeps the machine's /proc. Where the launcher asks for it, the init also mounts a
/dev/shm of the namespace's own there (`SHM_OPTIONS`): POSIX semaphores are files in it, so multiprocessing's locks,
and with them Inductor's compile workers, work in the sandbox, while nothing the candidate makes there reaches the
machine's /dev/shm or outlives the run. Neither namespace is available on every machine:
`enter_pid_namespace` says why not, and the launcher falls back to its process-tree walk as a
child subreaper, no weaker than before.
Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
from dataclasses import dataclass

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
CLONE_NEWIPC, CLONE_NEWNET = 0x08000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
_PR_SET_PDEATHSIG = 1
# Setting this to 0 turns the namespace off (the launcher's process-tree walk then stands alone).
NAMESPACE_ENV = "AUTOKERNEL_SANDBOX_PIDNS"
# Setting this to 0 turns the network namespace and the socket filter off, for a GPU stack that needs a socket (CUDA's
# MPS daemon is reached through a Unix socket); the run then says both are missing.
NETWORK_ENV = "AUTOKERNEL_SANDBOX_NET"
# The namespace's own /dev/shm: capped (a candidate cannot fill the machine's memory through it; the memory cgroup,
# where there is one, counts its pages too), writable by every user like the machine's, and gone with the mount
# namespace, that is with the run's last process.
SHM_OPTIONS = b"size=64m,mode=1777"

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Namespace:
    """What the launcher got: a PID namespace (and how), or the reason it runs without one."""
    kind: str | None          # "pid", "user+pid" or None
    reason: str = ""          # why there is none

    def describe(self) -> str:
        return f"{self.kind} namespace" if self.kind else f"no PID namespace ({self.reason})"


def _errno_text() -> str:
    return os.strerror(ctypes.get_errno())


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def enter_pid_namespace() -> Namespace:
    """Make this process's next child the init of a new PID namespace (this process stays outside it).

    Must be called while this process has one thread (unshare of a user namespace requires it).
    """
    if os.environ.get(NAMESPACE_ENV, "1") == "0":
        return Namespace(None, f"{NAMESPACE_ENV}=0")
    if _libc.unshare(CLONE_NEWPID) == 0:
        return Namespace("pid")
    plain = _errno_text()
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        return Namespace(None, f"unshare(CLONE_NEWPID): {plain}; with a user namespace: {_errno_text()}")
    try:
        # The same ids inside as outside: the candidate's files, devices and caches stay its user's.
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    except OSError as exc:
        # This process is in the new namespaces already and cannot leave: without a mapping the candidate
        # could write no file of its own, so the sandbox stops here, saying how to run without them.
        raise OSError(f"a user namespace was made but its ids could not be mapped ({exc}); set {NAMESPACE_ENV}=0 "
                      "to run candidates without a PID namespace") from None
    return Namespace("user+pid")


def isolate_network_and_ipc() -> dict[str, str]:
    """Move this process (the launcher, and so all it starts) into a network and an IPC namespace of its own.

    Network: no interface but a loopback that is down, so no TCP or UDP packet, to 127.0.0.1 or anywhere,
    and no abstract Unix socket reaches a process outside (what a path names, a pathname Unix socket, is
    the socket filter's: autokernel/sandbox/sockets.py); the descriptors the command inherits (the judge's
    verdict pipe, its worker's socket pair) are not addressed through a namespace and work as before. IPC: the
    System V shared memory, message queues and semaphores the command makes are its namespace's, and
    are destroyed with it once its last process has ended. Call after enter_pid_namespace (where that made a
    user namespace, its capabilities allow these). Returns {"network": "", "ipc": ""}, each "" once had, else
    why not.
    """
    got = {}
    for name, flag in (("network", CLONE_NEWNET), ("ipc", CLONE_NEWIPC)):
        if name == "network" and os.environ.get(NETWORK_ENV, "1") == "0":
            got[name] = f"{NETWORK_ENV}=0"
            continue
        got[name] = "" if _libc.unshare(flag) == 0 else f"unshare({name} namespace): {_errno_text()}"
    return got


def _own_mount_namespace() -> str:
    """A mount namespace of the init's own, none of whose mounts propagate to the machine's; '' or why not."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        return f"no mount namespace: {_errno_text()}"
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"could not make the mounts private: {_errno_text()}"
    return ""


def _mount(fstype: bytes, target: bytes, options: bytes | None = None) -> str:
    if _libc.mount(fstype, target, fstype, _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options) != 0:
        return f"could not mount {target.decode()}: {_errno_text()}"
    return ""


def mount_private(*, shm: bool) -> dict[str, str]:
    """In a mount namespace of the init's own, a /proc of this PID namespace and (shm) a /dev/shm of its own.

    Returns {"/proc": "" or why not} and, where shm, {"/dev/shm": "" or why not}. Without a mount namespace whose mounts
    are private neither is mounted: a mount there could show in the machine's.
    """
    why_not = _own_mount_namespace()
    mounted = {"/proc": why_not or _mount(b"proc", b"/proc")}
    if shm:
        mounted["/dev/shm"] = why_not or _mount(b"tmpfs", b"/dev/shm", SHM_OPTIONS)
    return mounted


def _report(fd: int, **fields) -> None:
    os.write(fd, (json.dumps(fields) + "\n").encode())


def run_init(command: list[str], *, pass_fds: list[int], preexec_fn, report_fd: int, lifeline_fd: int,
             private_shm: bool = False, allow_new_mounts=None) -> None:
    """The namespace's init (pid 1 inside): start the command, report its end, reap, wait to be killed.

    lifeline_fd: the read end of a pipe whose write end only the launcher holds, so it ends when the
    launcher does. private_shm: mount a /dev/shm of the namespace's own too. allow_new_mounts: called with the
    mount points mounted (["/proc", "/dev/shm"], those that were), before the command starts, so the sandbox's rules
    (made for the machine's file systems: a rule holds an object, not a path) can cover them too. Reports on
    report_fd: {"proc": "" or why /proc is the machine's, "shm": the same for /dev/shm (where private_shm)},
    {"error": ...} or {"pid": ...}, then {"returncode": ...}. Never returns.
    """
    try:
        # With the launcher gone the namespace must go too: the init's death kills everything in it. The
        # launcher may have died before this line; its end of the lifeline then has ended (getppid() says
        # nothing here: the parent is outside the namespace).
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if select.select([lifeline_fd], [], [], 0)[0]:
            os._exit(1)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        mounted = mount_private(shm=private_shm)
        if allow_new_mounts is not None:
            allow_new_mounts([target for target, why_not in mounted.items() if not why_not])
        _report(report_fd, proc=mounted["/proc"], **({"shm": mounted["/dev/shm"]} if private_shm else {}))
        try:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=pass_fds,
                                     preexec_fn=preexec_fn)
        except (OSError, subprocess.SubprocessError) as exc:
            _report(report_fd, error=f"the sandbox could not start the command: {exc}")
            os._exit(1)
        for fd in pass_fds:
            os.close(fd)        # the command holds them now; a copy here would keep a pipe from ending
        _report(report_fd, pid=child.pid)
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child.pid:
                _report(report_fd, returncode=os.waitstatus_to_exitcode(status))
                break
        # Orphans of the namespace are this process's children: reap them until the launcher kills us.
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                signal.pause()
    except BaseException as exc:       # never back into the launcher's code in a forked copy of it
        with contextlib.suppress(Exception):
            _report(report_fd, error=f"the namespace's init failed: {type(exc).__name__}: {exc}")
        os._exit(1)
