"""A memory cgroup around the candidate: a cap that counts every page its processes make, memfd and tmpfs files too.

The launcher's own cap (autokernel/sandbox/launcher.py) polls the resident set of the process tree, and a
resident set counts only what is mapped: a kernel that write()s into a memfd, or into a file of its
temporary folder on a tmpfs, holds memory no process maps (the red team held gigabytes past the cap
that way). The kernel's memory controller charges those pages to the cgroup of the process that made
them, so a group of the sandbox's own, with its limit, counts all of it; past the limit the kernel
kills a process inside. GPU memory is not host memory and is not counted, and the virtual ranges CUDA
reserves are not charged either, so the group is as safe on a GPU machine as on a CPU one.

A group can be had where this process may make one below its own: as root, or where the cgroup tree is
delegated to the user (cgroup v2 under systemd, a container that owns its cgroup). Elsewhere `create`
says why not and the launcher falls back (RLIMIT_AS, on machines without a GPU only). Only the standard
library is imported here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time

_MOUNTINFO = "/proc/self/mountinfo"
_REMOVE_WITHIN_S = 2.0


def _own_group() -> tuple[str, str] | None:
    """(the memory controller's folder for this process's group, "v1" or "v2"), or None."""
    try:
        groups = open("/proc/self/cgroup").read().splitlines()
        mounts = open(_MOUNTINFO).read().splitlines()
    except OSError:
        return None
    v1 = next((line.split(":", 2)[2] for line in groups if line.split(":")[1:2] and
               "memory" in line.split(":")[1].split(",")), None)
    for line in mounts:
        fields = line.split()
        if " - " not in line:
            continue
        kind, options = line.split(" - ", 1)[1].split()[0], line.split(" - ", 1)[1].split()[-1]
        if v1 is not None and kind == "cgroup" and "memory" in options.split(","):
            return os.path.join(fields[4], v1.lstrip("/")), "v1"
    v2 = next((line.split(":", 2)[2] for line in groups if line.startswith("0::")), None)
    for line in mounts:
        if v2 is not None and " - cgroup2 " in line:
            return os.path.join(line.split()[4], v2.lstrip("/")), "v2"
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


class MemoryGroup:
    """A memory cgroup of the sandbox's own, below this process's group, with its limit."""

    def __init__(self, path: str, version: str, limit_bytes: int):
        self.path, self.version, self.limit_bytes = path, version, limit_bytes
        self.parent = os.path.dirname(path)

    @classmethod
    def create(cls, limit_bytes: int) -> tuple[MemoryGroup | None, str]:
        """The group, or None and why there is none."""
        found = _own_group()
        if found is None:
            return None, "no memory cgroup controller is mounted"
        parent, version = found
        path = os.path.join(parent, f"autokernel-sandbox-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            if version == "v2":
                controllers = open(os.path.join(parent, "cgroup.subtree_control")).read().split()
                if "memory" not in controllers:
                    _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
            os.mkdir(path)
        except OSError as exc:
            return None, f"no memory cgroup could be made below {parent} ({exc.strerror or exc})"
        group = cls(path, version, limit_bytes)
        try:
            if version == "v1":
                _write(os.path.join(path, "memory.limit_in_bytes"), str(limit_bytes))
                with contextlib.suppress(OSError):       # swap counted too, where the kernel accounts it
                    _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit_bytes))
            else:
                _write(os.path.join(path, "memory.max"), str(limit_bytes))
                with contextlib.suppress(OSError):
                    _write(os.path.join(path, "memory.swap.max"), "0")
        except OSError as exc:
            group.remove()
            return None, f"the memory cgroup's limit could not be set ({exc.strerror or exc})"
        return group, ""

    def join(self, pid: int = 0) -> None:
        """Move a process (0: this one) into the group; what it starts from then on is in it too."""
        _write(os.path.join(self.path, "cgroup.procs"), str(pid or os.getpid()))

    def leave(self) -> None:
        """Move this process back to the group it came from (its children stay)."""
        _write(os.path.join(self.parent, "cgroup.procs"), str(os.getpid()))

    def oom_kills(self) -> int:
        """How many processes the kernel killed in the group for its limit."""
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        try:
            for line in open(os.path.join(self.path, name)):
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def peak_bytes(self) -> int:
        name = "memory.max_usage_in_bytes" if self.version == "v1" else "memory.peak"
        try:
            return int(open(os.path.join(self.path, name)).read().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def remove(self) -> None:
        """Remove the group once its processes are gone (the launcher killed them); pages left are the parent's."""
        deadline = time.monotonic() + _REMOVE_WITHIN_S
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)
