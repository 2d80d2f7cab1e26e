"""One run per repository: an exclusive lock on workspace/run.lock, held for the whole run.

The lock is an flock(2) on an open file, so the kernel releases it the moment the holder dies,
however it dies: a kill -9 never leaves a stale lock behind. The holder's PID is written into the
file so the refusal can name it. Children never inherit the descriptor (it is close-on-exec and
runner.run_child closes every other descriptor), so a leftover bench process cannot hold it.
A run that ends removes the file (and workspace/, when the lock made it and it is still empty), so a
run that failed its first checks leaves nothing in the user's repository. Since the file can be removed,
a lock taken counts only if the file it locked is still the one at the path (else it is taken again).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from autokernel.core import paths

LOCK_FILE_NAME = "run.lock"


class RunLocked(Exception):
    """Another run holds the repository; the message names its PID."""


class RunLock:
    def __init__(self, path: Path | None = None):
        self.path = path or paths.WORKSPACE / LOCK_FILE_NAME
        self._fd: int | None = None
        self._made_folder = False

    def acquire(self) -> RunLock:
        self._made_folder = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunLocked(f"another autokernel run (PID {holder}) is using this repository "
                                f"({self.path}); wait for it to end, or stop it first") from None
            if self._still_at_path(fd):
                break
            os.close(fd)        # its holder removed it between our open and our flock: lock the file there now
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def _still_at_path(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)     # removed while held, so no other run holds the name meanwhile
            os.close(self._fd)
            self._fd = None
            if self._made_folder:
                try:
                    self.path.parent.rmdir()       # only when empty: a run that wrote anything keeps it
                except OSError:
                    pass

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
