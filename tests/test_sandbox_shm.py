"""The namespace's own /dev/shm (autokernel/sandbox/namespaces.py mount_private, launcher.allow_new_mounts).

Without it nothing can be made in /dev/shm inside the sandbox, so multiprocessing.Lock() fails and Inductor's
compile workers never start. With it, the candidate gets a 64 MiB tmpfs that only its run sees and that ends with the
run; nothing else under /dev becomes writable, and the machine's /dev/shm stays out of reach. It is on by default
only where there is an NVIDIA GPU (confinement.private_shm_problem says why), so these tests turn it on with
AUTOKERNEL_SANDBOX_SHM=1. Every check runs real code in a child of runner.run_child, as a candidate would.
"""

import os
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.sandbox import confinement, landlock
from tests.processes import new_token

ROOT = Path(__file__).resolve().parents[1]
SHM_BYTES = 64 * 2**20          # namespaces.SHM_OPTIONS's size
needs_landlock = pytest.mark.skipif(landlock.abi() < 1, reason="this kernel has no Landlock")


def _child(code: str) -> runner.ChildResult:
    return runner.run_child([sys.executable, "-c", textwrap.dedent(code)], timeout_s=60, cwd=ROOT)


@pytest.fixture
def private_shm(monkeypatch):
    """AUTOKERNEL_SANDBOX_SHM=1; skips where the machine gives no PID namespace or no mount namespace."""
    monkeypatch.setenv(confinement.PRIVATE_SHM_ENV, "1")
    monkeypatch.delenv(CONFINE_ENV, raising=False)
    note = _child("pass").sandbox.get("shm")
    if note != "a /dev/shm of its own":
        pytest.skip(f"no /dev/shm of the sandbox's own on this machine: {note}")


def test_it_is_on_by_default_only_where_there_is_a_gpu(monkeypatch):
    monkeypatch.delenv(confinement.PRIVATE_SHM_ENV, raising=False)
    monkeypatch.setattr(confinement, "gpu_device_files", lambda: ["nvidia0", "nvidiactl"])
    assert confinement.private_shm_problem() == ""
    monkeypatch.setattr(confinement, "gpu_device_files", lambda: [])
    assert "no NVIDIA GPU" in confinement.private_shm_problem()
    monkeypatch.setenv(confinement.PRIVATE_SHM_ENV, "1")
    assert confinement.private_shm_problem() == ""
    monkeypatch.setattr(confinement, "gpu_device_files", lambda: ["nvidia0"])
    monkeypatch.setenv(confinement.PRIVATE_SHM_ENV, "0")
    assert confinement.private_shm_problem() == f"{confinement.PRIVATE_SHM_ENV}=0"


def test_a_lock_works_and_what_is_made_in_dev_shm_stays_in_the_run(private_shm):
    name = f"autokernel-test-{new_token()}"
    result = _child(f"""
        import errno, multiprocessing, os
        multiprocessing.Lock().acquire()
        print("lock ok")
        open("/dev/shm/{name}", "w").write("made in the sandbox")
        print("listed" if "{name}" in os.listdir("/dev/shm") else "not listed")
        stats = os.statvfs("/dev/shm")
        print("size", stats.f_blocks * stats.f_frsize)
        try:                                        # past the cap: the tmpfs is full, the machine's memory is not
            with open("/dev/shm/filler", "wb") as filler:
                for _ in range(80):
                    filler.write(bytes(2**20))
                    filler.flush()
            print("filled 80 MiB")
        except OSError as exc:
            print("full", errno.errorcode[exc.errno])
    """)
    assert result.stdout.split("\n")[:4] == ["lock ok", "listed", f"size {SHM_BYTES}", "full ENOSPC"], result.stderr
    assert not (Path("/dev/shm") / name).exists()       # never the machine's
    after = _child("import os; print(sorted(os.listdir('/dev/shm')))")
    assert after.stdout.strip() == "[]", after.stdout + after.stderr    # the next run's is a new, empty one


@needs_landlock
def test_nothing_else_under_dev_becomes_writable_and_the_machines_dev_shm_stays_out_of_reach(private_shm):
    attack = """
        import ctypes, os, stat
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWUSER, CLONE_NEWNS, MNT_DETACH = 0x10000000, 0x00020000, 2
        status = dict(line.split(":\\t") for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
        print("capabilities", int(status["CapEff"], 16), int(status["CapPrm"], 16))

        def attempt(what, action):
            try:
                outcome = action()
            except OSError as exc:
                print(what, "refused", exc.errno)
                return
            print(what, "refused" if outcome not in (None, 0) else "ALLOWED", outcome)

        def umount_shm():
            return libc.umount2(b"/dev/shm", MNT_DETACH) and ctypes.get_errno()

        def mount_over_dev():
            return libc.mount(b"tmpfs", b"/dev", b"tmpfs", 0, None) and ctypes.get_errno()

        def umount_in_a_namespace_of_its_own():        # where it would hold every capability (last: it stays there)
            if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                return ctypes.get_errno()
            return umount_shm()

        open("/dev/shm/mine", "w").write("#!/bin/sh\\necho ran\\n")
        os.chmod("/dev/shm/mine", 0o755)
        attempt("create in /dev", lambda: open("/dev/planted", "w").close())
        attempt("mkdir in /dev", lambda: os.mkdir("/dev/planted"))
        attempt("rename out of /dev/shm", lambda: os.rename("/dev/shm/mine", "/dev/planted"))
        attempt("link out of /dev/shm", lambda: os.link("/dev/shm/mine", "/dev/planted"))
        attempt("execute from /dev/shm", lambda: os.execv("/dev/shm/mine", ["mine"]))
        attempt("umount /dev/shm", umount_shm)
        attempt("mount over /dev", mount_over_dev)
        attempt("umount in a user namespace", umount_in_a_namespace_of_its_own)
        stats = os.statvfs("/dev/shm")
        print("size", stats.f_blocks * stats.f_frsize)
    """
    result = _child(attack)
    lines = result.stdout.splitlines()
    assert lines[0] == "capabilities 0 0", result.stdout + result.stderr
    assert len(lines) == 10 and all(" refused " in line for line in lines[1:9]), result.stdout + result.stderr
    assert lines[9] == f"size {SHM_BYTES}"
    assert not Path("/dev/planted").exists()


@needs_landlock
def test_turned_off_dev_shm_is_the_machines_and_nothing_can_be_made_in_it(monkeypatch):
    monkeypatch.setenv(confinement.PRIVATE_SHM_ENV, "0")
    monkeypatch.delenv(CONFINE_ENV, raising=False)
    name = f"autokernel-test-{new_token()}"
    result = _child(f"""
        import multiprocessing
        for what, action in (("lock", multiprocessing.Lock), ("file", lambda: open("/dev/shm/{name}", "w"))):
            try:
                action()
                print(what, "made")
            except PermissionError:
                print(what, "refused")
    """)
    assert result.stdout.split() == ["lock", "refused", "file", "refused"], result.stdout + result.stderr
    assert result.sandbox["shm"] == f"{confinement.PRIVATE_SHM_ENV}=0"
    assert not (Path("/dev/shm") / name).exists()
