"""Linux Landlock through ctypes: confine a process's file and network access without privileges.

The sandbox (autokernel/sandbox/launcher.py) applies a ruleset in the candidate's process just before it
execs bench.py, so that process and everything it starts can only:
  - read what `readable` lists (everything but the user's home and the repository's .git/ and
    workspace/, see sandbox.readable_paths), so a key file there is out of reach;
  - write, create or delete under `writable` (its private temporary folder and the compiler
    caches), so it cannot touch the repository, .git/config, the venv or the user's files;
  - write to existing device files (/dev/null, the GPU's /dev/nvidia*), never create files there (except in the
    namespace's own /dev/shm where there is one: launcher.allow_new_mounts);
  - open no TCP connection and bind no TCP port (Landlock ABI 4+);
  - signal no process outside the sandbox, the launcher included (ABI 6+).
Every feature the running kernel lacks is left out (`abi()` says which); a kernel without
Landlock gets no confinement from this module, and the sandbox reports that.
"""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path
from typing import Iterable

# The syscall numbers are the same on every architecture (they were added after the tables were unified).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14                  # ABI 2, ABI 3
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1      # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1   # ABI 6

READ = READ_FILE | READ_DIR
_MAKE = MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE     # the rights a rule on a file (not a folder) may hold


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled)."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return 0
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(version))


def write_rights(version: int) -> int:
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | _MAKE
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"landlock {what}: {os.strerror(errno)}")
    return result


class Ruleset:
    """A ruleset under construction; `restrict_self()` (in the process to confine) makes it binding."""

    def __init__(self, version: int, *, deny_tcp: bool = True, scope_signals: bool = True,
                 handled_fs: int | None = None):
        """handled_fs: the file rights this ruleset decides (default: reading and writing); 0 leaves files alone
        (the network and signal rules alone, where file confinement is off), write_rights(version) confines
        only writing (a layer stacked on a domain that already confines reading)."""
        if version < 1:
            raise OSError("this kernel has no Landlock")
        self.version = version
        self.handled = READ | write_rights(version) if handled_fs is None else handled_fs
        attr = _RulesetAttr(self.handled,
                            NET_BIND_TCP | NET_CONNECT_TCP if deny_tcp and version >= 4 else 0,
                            SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET if scope_signals and version >= 6 else 0)
        self.fd = _check(_libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                                       ctypes.c_uint32(0)), "create_ruleset")
        self.features = {"filesystem": bool(self.handled), "tcp_denied": bool(attr.handled_access_net),
                         "signals_scoped": bool(attr.scoped)}

    def allow(self, paths: Iterable[str | Path], rights: int) -> None:
        """Grant `rights` beneath each path that exists (on a file, only the rights a file can hold)."""
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue        # gone or unreachable: nothing to grant
            try:
                granted = rights & self.handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    granted &= _FILE_ONLY
                if granted:
                    rule = _PathBeneathAttr(granted, fd)
                    _check(_libc.syscall(_ADD_RULE, ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                         ctypes.byref(rule), ctypes.c_uint32(0)), f"add_rule {path}")
            finally:
                os.close(fd)

    def restrict_self(self) -> None:
        """Confine the calling process (and all it starts) for good. Sets no_new_privs, which Landlock needs."""
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(_libc.syscall(_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)), "restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
