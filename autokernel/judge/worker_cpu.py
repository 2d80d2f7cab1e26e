"""The CPU time the candidate's worker processes use over a timed call, as the judge reads it from outside them.

On a CPU (the Triton interpreter) it is a timed call's second clock beside the judge's wall clock
(timing.busy_ms): on two cores shared with other jobs, each process's wait for a core as it wakes put about
10 ms a call on the wall clock and none on this one. It must count all of the worker's work, or it would let a
forger hide some, so a reading is given only where it does: every process below the worker's launcher is counted
(each one's process CPU clock holds every thread it has had, ended ones too), and a reading is withheld (None: the
wall clock alone judges) wherever
- a task born during the call is the candidate's (below the judge) or ended before the judge saw whose it was: a
  child's time is on no clock of its parent's (tests/attacks/computes_in_a_forked_child.py);
- a counted process ended, or its pid now names another process (its start time changed);
- the machine handed out so many ids that the PID namespace's counter may have wrapped round;
- the list of processes moved while it was walked, or anything could not be read.
Only the standard library and process_tree are used; nothing here runs candidate code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from autokernel.sandbox import process_tree

MAX_BIRTHS = 64            # tasks born during one timed call beyond which its CPU clock is not read
WALKS = 4                  # walks of the process tree, until two in a row agree
_CPUCLOCK_SCHED = 2        # a process CPU clock's id is ~pid << 3 | 2 (Linux's MAKE_PROCESS_CPUCLOCK)


@dataclass(frozen=True)
class CpuMark:
    """The start of a span: the processes counted, their start times, the namespace's last id, the machine's forks
    since boot and the CPU time the processes had used."""
    pids: tuple[int, ...]
    starts: tuple[int, ...]
    born: int
    forks: int
    used_ns: int


def mark(root: int) -> CpuMark | None:
    """A span's start for the processes below root (root too). The last id is read first: a process of the
    candidate's born after it is judged at the end; one born before it and still running is among those counted."""
    born, forks = last_pid(), fork_count()
    pids = stable_walk(root)
    starts = start_times(pids) if pids else None
    used = cpu_ns(pids) if pids else None
    if born is None or forks is None or starts is None or used is None:
        return None
    return CpuMark(tuple(pids), starts, born, forks, used)


def ms_since(start: CpuMark | None, judge: int) -> float | None:
    """The CPU time the processes of `start` used since, in ms, where it counts all of the candidate's work (see
    the module's docstring); judge is the judge's pid, above every process of the candidate's."""
    if start is None:
        return None
    now, starts = cpu_ns(start.pids), start_times(start.pids)
    last, forks, most = last_pid(), fork_count(), pid_max()
    if now is None or starts != start.starts or last is None or forks is None or most is None:
        return None
    if forks - start.forks >= most // 2 or not 0 <= last - start.born <= MAX_BIRTHS or now < start.used_ns:
        return None
    if not all(foreign(tid, judge, start.pids) for tid in range(start.born + 1, last + 1)):
        return None
    return (now - start.used_ns) / 1e6


def stable_walk(root: int) -> list[int] | None:
    """root and the running processes below it, walked until two walks in a row agree (None if they never do): a
    process that ends during a walk hands its children to a parent whose list may have been read already."""
    seen = None
    for _ in range(WALKS):
        walked = sorted([root, *process_tree.running_below(root)])
        if walked == seen:
            return walked
        seen = walked
    return None


def last_pid() -> int | None:
    """The last process or thread id handed out in this PID namespace: any task born since moves it."""
    return _read_int("/proc/sys/kernel/ns_last_pid")


def pid_max() -> int | None:
    return _read_int("/proc/sys/kernel/pid_max")


def fork_count() -> int | None:
    """The tasks the machine has started since boot (/proc/stat's "processes"): it tells a wrapped id counter."""
    try:
        with open("/proc/stat") as handle:
            return int(next(line for line in handle if line.startswith("processes ")).split()[1])
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def cpu_ns(pids) -> int | None:
    """The CPU time the processes pids have used, in ns: each one's process CPU clock, which counts every thread it
    has had, ended ones too (not its children's). None where one of them has ended."""
    total = 0
    for pid in pids:
        try:
            total += time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)
        except OSError:
            return None
    return total


def start_times(pids) -> tuple[int, ...] | None:
    """Each process's start time (clock ticks after boot): a pid taken by another process has another."""
    try:
        return tuple(int(process_tree.stat_fields(f"/proc/{pid}/stat")[19]) for pid in pids)
    except (OSError, IndexError, ValueError):
        return None


def foreign(tid: int, judge: int, counted) -> bool:
    """The task tid (a process or a thread) is alive and none of the candidate's: not below the judge, or a thread
    of one of the processes `counted` (whose CPU clocks count it). False where it is gone or cannot be read."""
    try:
        with open(f"/proc/{tid}/status") as handle:
            tgid = int(next(line for line in handle if line.startswith("Tgid:")).split()[1])
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    if tgid in counted:
        return True
    pid = tgid
    for _ in range(64):                       # up through the parents: the judge, or the top of this PID namespace
        if pid == judge:
            return False
        try:
            pid = int(process_tree.stat_fields(f"/proc/{pid}/stat")[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid <= 1:
            return True
    return False


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None
