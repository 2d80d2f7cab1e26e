"""What the sandbox launcher gives the command's process before it execs, and the protections had or missing.

`isolate` runs in the launcher before it starts anything: a network and an IPC namespace
(autokernel/sandbox/namespaces.py), a memory cgroup (autokernel/sandbox/memory_group.py), and whether the socket
filter (autokernel/sandbox/sockets.py) can be installed; what the machine cannot give is listed in
`Protections.missing`, with why and what it leaves open, for the run to say. `confine` returns what runs in the
command's process between fork and exec: its parent-death signal, no core dumps, an address-space cap where no
cgroup counts memory (CPU machines only), no capabilities, the Landlock ruleset, then the socket filter.
Only the standard library is imported here.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from dataclasses import dataclass, field
from pathlib import Path

from autokernel.sandbox import landlock, namespaces, sockets
from autokernel.sandbox.memory_group import MemoryGroup

# Where no memory cgroup can be had, a machine without a GPU caps each process's address space instead: the tree's
# cap plus this much for what a process reserves and never uses (shared libraries, thread stacks, allocator arenas:
# about 2 GiB for Python with torch and Triton). It counts a memfd once it is mapped, not one only written to. Never
# on a GPU machine: CUDA reserves address space far beyond any memory (tens of GiB per device at init).
ADDRESS_SPACE_SLACK_MB = 8192
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP = 1, 24
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Protections:
    group: MemoryGroup | None = None            # the memory cgroup, where one was made
    address_space_mb: int | None = None         # each process's address-space cap, where there is no group
    filter_sockets: bool = False
    missing: list[str] = field(default_factory=list)


def gpu_device_files() -> list[str]:
    """The NVIDIA device files of this machine (none on a machine without an NVIDIA GPU)."""
    try:
        return sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    except OSError:
        return []


def isolate(memory_limit_mb: int | None) -> Protections:
    """Network and IPC namespaces for this process (the launcher) and all it starts, the memory group, the socket
    filter's availability: had here, or said missing. Call after namespaces.enter_pid_namespace."""
    given = Protections()
    isolated = namespaces.isolate_network_and_ipc()
    if isolated["network"]:
        given.missing.append(f"network namespace ({isolated['network']}): UDP and abstract Unix sockets reach "
                             "processes outside the sandbox")
    if isolated["ipc"]:
        given.missing.append(f"IPC namespace ({isolated['ipc']}): System V shared memory and message queues the "
                             "candidate makes outlive its run")
    why_not = socket_filter_problem()
    given.filter_sockets = not why_not
    if why_not:
        given.missing.append(f"socket filter ({why_not}): Unix sockets named by a path (an ssh-agent's, a "
                             "database's) can be reached")
    if memory_limit_mb:
        given.group, why_not = MemoryGroup.create(memory_limit_mb * 2**20)
        if given.group is None:
            if not gpu_device_files():
                given.address_space_mb = memory_limit_mb + ADDRESS_SPACE_SLACK_MB
            given.missing.append(f"memory cgroup ({why_not}): the memory cap counts what the processes map"
                                 + (" (each one's address space is capped too)" if given.address_space_mb else "")
                                 + ", not memory held in files such as a memfd or a tmpfs file")
    return given


# The socket filter: "1" on, "0" off; unset, on except where there is an NVIDIA GPU. On the H200 every process in the
# sandbox failed CUDA's initialization with it (error 304, "OS call failed": the driver opens a Unix socket to look
# for MPS, and the filter refuses AF_UNIX sockets), so there it stays off until it lets the driver's socket through.
SOCKET_FILTER_ENV = "AUTOKERNEL_SANDBOX_SOCKETS"


def socket_filter_problem() -> str:
    """'' where the socket filter can be installed here, else why not."""
    if os.environ.get(namespaces.NETWORK_ENV, "1") == "0":
        return f"{namespaces.NETWORK_ENV}=0"
    chosen = os.environ.get(SOCKET_FILTER_ENV, "")
    if chosen == "0":
        return f"{SOCKET_FILTER_ENV}=0"
    if chosen != "1" and gpu_device_files():
        return (f"off where an NVIDIA GPU is: CUDA's initialization failed under it (error 304); "
                f"{SOCKET_FILTER_ENV}=1 turns it on")
    if sockets.program() is None:
        return f"no socket filter for this architecture ({os.uname().machine})"
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    return "" if "Seccomp:" in status else "this kernel has no seccomp"


# The namespace's own /dev/shm (namespaces.mount_private): "1" on, "0" off; unset, on only where there is an NVIDIA GPU.
# Without it nothing can be made in /dev/shm (Landlock lets the candidate write /dev's existing files, never create
# one), so multiprocessing.Lock() fails (EACCES on its POSIX semaphore) and Inductor's compile-worker pool never
# becomes ready, silently: every torch.compile in the sandbox (verify's, the judge's worker) compiles serially, in
# process, on one core. Why not everywhere: a working pool starts a sidecar and one worker per core (up to 32), each
# importing torch (hundreds of MiB), inside the sandbox's memory cap. On a GPU machine (the H200: 16 cores, a cap of
# 64 GiB) that is a few GiB, and compiles there are what verify waits for and times. On a machine without a GPU
# (CI: 2 cores, a few GiB of cap, counted by a cgroup or per process's address space) it would buy little parallelism
# and could get an honest candidate killed for memory its compiler's workers hold, and slow CI with their startup;
# there the tests turn it on to check it (tests/test_sandbox_shm.py).
PRIVATE_SHM_ENV = "AUTOKERNEL_SANDBOX_SHM"


def private_shm_problem() -> str:
    """'' where the namespace's init is to mount a /dev/shm of its own, else why not (the machine's one stays)."""
    chosen = os.environ.get(PRIVATE_SHM_ENV, "")
    if chosen == "0":
        return f"{PRIVATE_SHM_ENV}=0"
    if chosen != "1" and not gpu_device_files():
        return f"off where there is no NVIDIA GPU; {PRIVATE_SHM_ENV}=1 turns it on"
    return ""


def _drop_capabilities() -> None:
    """A root user's candidate must not keep root's powers (reading any /proc entry, above all)."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)   # fails harmlessly without CAP_SETPCAP
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def confine(ruleset: landlock.Ruleset | None, *, address_space_mb: int | None = None, filter_sockets: bool = True):
    def confine_child() -> None:          # runs in the child, between fork and exec
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if address_space_mb:
            limit = address_space_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _drop_capabilities()
        if ruleset is not None:
            ruleset.restrict_self()
        if filter_sockets:
            why_not = sockets.install()
            if why_not:             # the launcher found it possible: a command that ran without it would be unsafe
                raise OSError(f"the socket filter could not be installed: {why_not}")
    return confine_child
