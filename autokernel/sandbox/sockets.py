"""A seccomp filter on the candidate's sockets: only the families a network namespace makes harmless.

The sandbox puts the candidate in a network namespace of its own (autokernel/sandbox/namespaces.py): no
interface but a loopback that is down, so no TCP or UDP packet and no abstract Unix socket reaches any
process outside. Two kinds of socket are not namespaced that way: a Unix socket named by a path (an
ssh-agent's, a desktop's keyring, a database's) is found through the file system, and a VSOCK reaches
the hypervisor. This filter, installed in the command's process before it starts (inherited by all it
starts, never removable), lets socket() make only AF_INET, AF_INET6 and AF_NETLINK sockets (which the
namespace confines) and refuses every other family with EACCES. socketpair() stays allowed: a pair
reaches only its two ends (the judge's channel to its worker is one). io_uring, which can make sockets
without socket(), is refused, and so is every system call of another architecture (x86's 32-bit calls
from a 64-bit process, where socketcall() would make a socket unseen). Where this machine's
architecture is not known here, or seccomp is missing, `install` says so and the run reports it.
Only the standard library is imported here.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
# BPF: load a word (absolute), jump if equal / greater or equal (constant), return a constant.
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
# struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low word first: little-endian machines only here).
_NR, _ARCH, _ARG0 = 0, 4, 16
# machine -> (AUDIT_ARCH_*, socket's number, io_uring_setup's number, the x32 bit or None)
_ARCHITECTURES = {"x86_64": (0xC000003E, 41, 425, 0x40000000), "aarch64": (0xC00000B7, 198, 425, None)}
ALLOWED_FAMILIES = (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)

_libc = ctypes.CDLL(None, use_errno=True)


class _Filter(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes | None:
    """The filter's BPF program for this machine, or None where its architecture is not known here."""
    known = _ARCHITECTURES.get(platform.machine())
    if known is None:
        return None
    arch, socket_nr, io_uring_nr, x32 = known
    refuse = _RET_ERRNO | errno.EACCES
    ops = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, arch, jt=1), _op(_RET_K, refuse),     # another architecture's call
           _op(_LD_W_ABS, _NR)]
    if x32 is not None:
        ops += [_op(_JGE_K, x32, jf=1), _op(_RET_K, refuse)]                         # x32 calls on x86_64
    ops += [_op(_JEQ_K, io_uring_nr, jf=1), _op(_RET_K, refuse),
            _op(_JEQ_K, socket_nr, jt=1), _op(_RET_K, _RET_ALLOW),
            _op(_LD_W_ABS, _ARG0)]
    for i, family in enumerate(ALLOWED_FAMILIES):
        ops.append(_op(_JEQ_K, family, jt=len(ALLOWED_FAMILIES) - i))
    ops += [_op(_RET_K, refuse), _op(_RET_K, _RET_ALLOW)]
    return b"".join(ops)


def install() -> str:
    """Install the filter on this process (and all it will start): '' once done, else why not."""
    code = program()
    if code is None:
        return f"no socket filter for this architecture ({platform.machine()})"
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"no_new_privs: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _Filter(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        return f"seccomp: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    return ""
