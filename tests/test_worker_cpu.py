"""autokernel/judge/worker_cpu.py: the CPU time of the worker's processes over a timed call, which the judge reads
from outside them, and the cases where it withholds it (the wall clock alone then judges)."""

import os
import subprocess
import sys

from autokernel.judge import worker_cpu

SPIN_THEN_SLEEP = ("import threading, time\n"
                   "def spin():\n    while time.thread_time() < 0.06: pass\n"
                   "t = threading.Thread(target=spin); t.start(); t.join(); print('done', flush=True)\n"
                   "time.sleep(60)")


def _spinner() -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_SLEEP], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "done\n"
    return child


def test_cpu_ns_counts_a_process_s_threads_even_ended_ones_and_not_once_it_is_gone():
    # 60 ms of CPU in a thread of the child's own, which has ended: the child's clock has all of it.
    child = _spinner()
    try:
        used = worker_cpu.cpu_ns([child.pid])
        assert used >= 60e6 and worker_cpu.cpu_ns([child.pid, os.getpid()]) > used
        assert worker_cpu.start_times([child.pid]) == worker_cpu.start_times([child.pid])
    finally:
        child.kill()
        child.wait()
    assert worker_cpu.cpu_ns([child.pid]) is None and worker_cpu.start_times([child.pid]) is None


def test_the_last_id_and_the_fork_count_move_when_a_process_is_born():
    before = (worker_cpu.last_pid(), worker_cpu.fork_count())
    subprocess.run(["true"], check=True)
    after = (worker_cpu.last_pid(), worker_cpu.fork_count())
    assert None not in before and None not in after and after[0] != before[0] and after[1] > before[1]
    assert worker_cpu.pid_max() >= 32768 or worker_cpu.pid_max() > after[0]


def test_a_task_is_foreign_unless_it_is_below_the_judge_or_gone_and_a_counted_process_s_thread_is_foreign():
    child = _spinner()
    try:
        assert not worker_cpu.foreign(child.pid, os.getpid(), counted=[])          # below this "judge": its making
        assert worker_cpu.foreign(child.pid, child.pid + 10**6, counted=[])         # below another one only
        assert worker_cpu.foreign(child.pid, os.getpid(), counted=[child.pid])      # its clock counts it
        ended = subprocess.Popen(["true"])
        ended.wait()
        assert not worker_cpu.foreign(ended.pid, os.getpid(), counted=[])         # gone: whose it was is unknown
    finally:
        child.kill()
        child.wait()


def test_a_reading_is_withheld_where_a_child_is_born_or_a_counted_process_is_not_the_one_marked():
    child = _spinner()
    try:
        start = worker_cpu.mark(child.pid)
        assert start is not None and start.pids == (child.pid,)
        reading = worker_cpu.ms_since(start, os.getpid())
        # Another job's task ended meanwhile on this shared machine can withhold it too, never make it wrong.
        assert reading is None or 0 <= reading < 50
        subprocess.run(["true"], check=True)                     # born below the judge during the span
        assert worker_cpu.ms_since(start, os.getpid()) is None
        later = worker_cpu.mark(child.pid)
        moved = worker_cpu.CpuMark(later.pids, tuple(t - 1 for t in later.starts), later.born, later.forks,
                                   later.used_ns)
        assert worker_cpu.ms_since(moved, os.getpid()) is None     # the pid now names another process
        wrapped = worker_cpu.CpuMark(later.pids, later.starts, later.born, later.forks - worker_cpu.pid_max(),
                                     later.used_ns)
        assert worker_cpu.ms_since(wrapped, os.getpid()) is None   # so many births the counter may have wrapped
    finally:
        child.kill()
        child.wait()
    assert worker_cpu.ms_since(start, os.getpid()) is None          # a counted process ended
    assert worker_cpu.ms_since(None, os.getpid()) is None


def test_the_walk_is_taken_again_until_two_agree(monkeypatch):
    from autokernel.sandbox import process_tree

    walks = iter([[5], [5, 7], [5, 7]])
    monkeypatch.setattr(process_tree, "running_below", lambda root: next(walks))
    assert worker_cpu.stable_walk(1) == [1, 5, 7]
    monkeypatch.setattr(process_tree, "running_below", lambda root, n=iter(range(100)): [next(n)])
    assert worker_cpu.stable_walk(1) is None
