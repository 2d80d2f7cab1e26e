"""What tests that start processes share: waiting for one to be gone, found by pid or by a token in its command line.

A candidate runs in a PID namespace of its own where the machine allows one (autokernel/sandbox/namespaces.py):
the pids it sees are not this process's, so a test finds its processes from outside by a token it
puts in their command line (`marked`), which children started by fork keep.
"""

import time
import uuid
from pathlib import Path


def is_gone(pid: int) -> bool:
    # A killed process may linger as a zombie until its new parent reaps it: that counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def gone_within(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if is_gone(pid):
            return True
        time.sleep(0.05)
    return False


def new_token() -> str:
    return f"autokernel-test-{uuid.uuid4().hex}"


def marked(token: str) -> list[int]:
    """The live processes (as this process sees them) whose command line holds token."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes() and not is_gone(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def all_gone_within(token: str, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not marked(token):
            return True
        time.sleep(0.05)
    return False
