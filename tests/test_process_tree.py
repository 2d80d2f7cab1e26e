"""autokernel/sandbox/process_tree.py's walk down from a process through /proc's children lists, which the judge
runs after every answer of the worker (judge_link.CandidateWorker.check_alone)."""

import os
import subprocess
import sys
import time

from autokernel.sandbox import process_tree


def test_running_below_finds_children_and_grandchildren_and_not_once_they_are_gone():
    # A child that starts a grandchild and waits: both are below this process, and neither once killed.
    child = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']).wait()"])
    try:
        deadline = time.monotonic() + 10
        while len(process_tree.running_below(child.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        [grandchild] = process_tree.running_below(child.pid)
        assert child.pid in process_tree.children(os.getpid())
        assert {child.pid, grandchild} <= set(process_tree.running_below(os.getpid()))
        assert process_tree.running(grandchild)
        os.kill(grandchild, 9)
        child.wait(timeout=10)
        assert child.pid not in process_tree.running_below(os.getpid())
        assert not process_tree.running(grandchild)
    finally:
        child.kill()
        child.wait()


def test_cpu_ns_counts_a_process_s_threads_even_ended_ones_and_not_once_it_is_gone():
    # A child that spins 60 ms of CPU in a thread of its own, which then ends, and says so: its clock has all of it.
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "def spin():\n    while time.thread_time() < 0.06: pass\n"
                              "t = threading.Thread(target=spin); t.start(); t.join(); print('done', flush=True)\n"
                              "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        used = process_tree.cpu_ns([child.pid])
        assert used >= 60e6 and process_tree.cpu_ns([child.pid, os.getpid()]) > used
    finally:
        child.kill()
        child.wait()
    assert process_tree.cpu_ns([child.pid]) is None


def test_last_pid_moves_when_a_process_is_born():
    before = process_tree.last_pid()
    subprocess.run(["true"], check=True)
    after = process_tree.last_pid()
    assert before is not None and after is not None and after != before


def test_a_task_is_foreign_unless_it_is_below_the_root_or_gone_and_a_counted_process_s_thread_is_foreign():
    # The judge's question about each task born during a timed call (judge_link.CandidateWorker._cpu_ms_since).
    grandchild = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']).wait()"])
    try:
        deadline = time.monotonic() + 10
        while not process_tree.running_below(grandchild.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        [below] = process_tree.running_below(grandchild.pid)
        assert not process_tree.foreign(below, os.getpid(), counted=[])          # below this process: its making
        assert process_tree.foreign(below, grandchild.pid + 10**6, counted=[])   # below another root only
        assert process_tree.foreign(below, os.getpid(), counted=[below])         # its clock counts it
        ended = subprocess.Popen(["true"])
        ended.wait()
        assert not process_tree.foreign(ended.pid, os.getpid(), counted=[])      # gone: whose it was is unknown
    finally:
        grandchild.kill()
        grandchild.wait()
