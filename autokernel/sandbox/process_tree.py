"""Process trees seen through /proc: the descendants of a process, their memory, and killing them all; and the
parent's own /proc entries closed while a child runs (undumpable).

The sandbox launcher (autokernel/sandbox/launcher.py) is a child subreaper, so every process its command
starts stays below it, even one that left for a session of its own; these helpers walk that tree.
Where the launcher has a PID namespace (autokernel/sandbox/namespaces.py), the kernel kills the tree and
this walk only counts and measures it. Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time

KILL_ROUNDS_S = 5.0          # how long kill_tree keeps killing a tree that keeps forking
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) for every process visible in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = stat_fields(f"/proc/{name}/stat")
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


def children(pid: int) -> list[int]:
    """pid's children, from each of its threads' /proc children list (no walk over every process: cheap enough to
    ask after every call); None where the kernel has no such list (CONFIG_PROC_CHILDREN off)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue                       # a thread that ended meanwhile
            return [child for child, (ppid, _) in process_table().items() if ppid == pid]
        except OSError:
            continue
    return found


def running(pid: int) -> bool:
    """pid exists and one of its threads is not a zombie: a process whose first thread ended (SYS_exit) shows as a
    zombie while its other threads run on (tests/attacks/helper_whose_first_thread_exited.py)."""
    state = _state(f"/proc/{pid}/stat")
    if state != b"Z":
        return state is not None and state != b"X"
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(_state(f"/proc/{pid}/task/{tid}/stat") not in (None, b"Z", b"X") for tid in tasks)


def _state(stat_path: str) -> bytes | None:
    try:
        return stat_fields(stat_path)[0]
    except (OSError, IndexError):
        return None


def stat_fields(stat_path: str) -> list[bytes]:
    """A /proc .../stat file's fields after the command's name (which may hold spaces and parentheses): state,
    ppid, ... (proc(5)'s field 3 is index 0)."""
    with open(stat_path, "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()


def running_below(root: int) -> list[int]:
    """The running processes below root (children() walked down), without reading the whole process table."""
    found, frontier = [], children(root)
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        frontier += children(pid)
    return [pid for pid in found if running(pid)]


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
        reap_orphans(keep_zombie)
        time.sleep(0.01)
    return len(killed)


def reap_orphans(keep: int | None = None) -> None:
    """Collect the zombies of processes that were reparented to this one (never `keep`, which Popen waits for)."""
    me = os.getpid()
    for pid, (ppid, state) in process_table().items():
        if ppid == me and state == "Z" and pid != keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def live_descendants(root: int, *, besides: tuple[int, ...] = ()) -> list[int]:
    """The processes below root that are still running (not zombies), other than `besides`."""
    table = process_table()
    return [pid for pid in descendants(root, table) if table[pid][1] not in "ZX" and pid not in besides]


# ------------------------------------------------------------------ the parent's own /proc entries
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4
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
