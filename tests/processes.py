"""What tests that start processes share: waiting for one to be gone."""

import time
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
