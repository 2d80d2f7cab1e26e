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


def test_a_process_whose_first_thread_exited_runs_while_another_thread_does():
    # SYS_exit ends the calling thread alone: /proc/<pid>/stat then says Z, the process runs on (check_alone's strays).
    child = subprocess.Popen([sys.executable, "-c", "import ctypes, threading, time\n"
                              "threading.Thread(target=time.sleep, args=(60,)).start()\n"
                              "print('up', flush=True)\nctypes.CDLL(None).syscall(60, 0)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"
        deadline = time.monotonic() + 10
        while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the first thread did not exit"
            time.sleep(0.02)
        assert process_tree.running(child.pid) and child.pid in process_tree.running_below(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert not process_tree.running(child.pid)
