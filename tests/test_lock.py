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


def test_a_run_that_ends_leaves_no_lock_file_nor_the_folder_the_lock_made(tmp_path):
    folder = tmp_path / "workspace"
    with RunLock(folder / "run.lock"):
        assert (folder / "run.lock").read_text().strip().isdigit()
    assert not folder.exists(), "a run that failed its first checks leaves nothing in the repository"
    folder.mkdir()
    (folder / "state.json").write_text("{}")
    with RunLock(folder / "run.lock"):
        pass
    assert sorted(path.name for path in folder.iterdir()) == ["state.json"], "a folder that was there stays"


def test_a_lock_on_a_file_its_holder_removed_is_taken_again_on_the_file_at_the_path(tmp_path, monkeypatch):
    """A run that opened the file just before its holder released (and removed) it locks a file no other run can
    find: it must take the lock again on the one at the path, else two runs would each hold a lock."""
    path = tmp_path / "run.lock"
    holder = RunLock(path).acquire()
    late = RunLock(path)
    real_flock, calls = __import__("fcntl").flock, []

    def flock_after_the_holder_released(fd, operation):
        if not calls:
            holder.release()            # between the late run's open and its flock
        calls.append(fd)
        return real_flock(fd, operation)

    monkeypatch.setattr("autokernel.core.lock.fcntl.flock", flock_after_the_holder_released)
    late.acquire()
    assert len(calls) == 2 and path.exists()
    with pytest.raises(RunLocked):
        RunLock(path).acquire()
    late.release()
