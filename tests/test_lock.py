"""Tests for autokernel/core/lock.py: one run per repository, the holder named, and no stale lock after a kill."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.core.lock import RunLock, RunLocked

PROJECT = Path(__file__).resolve().parents[1]


def test_a_second_lock_is_refused_naming_the_holder_and_free_after_release(tmp_path):
    path = tmp_path / "run.lock"
    first = RunLock(path).acquire()
    with pytest.raises(RunLocked, match=r"another autokernel run \(PID \d+\) is using this repository"):
        RunLock(path).acquire()
    first.release()
    with RunLock(path):
        pass


def test_a_killed_holder_leaves_no_stale_lock_and_children_do_not_inherit_it(tmp_path):
    path = tmp_path / "run.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(PROJECT)!r})
        from pathlib import Path
        from autokernel.core.lock import RunLock
        RunLock(Path({str(path)!r})).acquire()
        child = subprocess.Popen(["sleep", "60"], close_fds=False)
        print(child.pid, flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    sleeper = int(holder.stdout.readline())
    try:
        with pytest.raises(RunLocked, match=f"PID {holder.pid}"):
            RunLock(path).acquire()
        holder.kill()
        holder.wait()
        with RunLock(path):      # the sleeper it started is still alive, and holds nothing
            assert Path(f"/proc/{sleeper}").exists()
    finally:
        subprocess.run(["kill", str(sleeper)])
