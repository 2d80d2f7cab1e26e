"""Attack (red team, round 4): a helper process, forked at import, that computes every timed call's output while
the worker reports only its own CPU time.

The helper's first thread ends (SYS_exit) while a second one runs on, so /proc/<pid>/stat showed the helper as a
zombie: process_tree.running() said it had ended, the judge's check that the worker runs alone whenever it answers
(judge_link.CandidateWorker.check_alone) did not see it, and neither did the CPU clock of the worker's processes
(judge/worker_cpu.py). With the tamper check silenced, as in computes_in_a_forked_child, twenty times the work was
off every clock the judge read: a PASS. A process runs while any of its threads does: a FAIL at load.
"""
import _thread
import ctypes
import mmap
import os
import struct
import time

import torch

from autokernel.judge import timing as _timing
from autokernel.judge.candidate import worker_tampering as _tampering
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_real = _timing.timed_call
_SIZE = 64 << 20
_shm = mmap.mmap(-1, _SIZE)
_req_r, _req_w = os.pipe()
_done_r, _done_w = os.pipe()


def _helper_loop():
    while True:
        if not os.read(_req_r, 1):
            os._exit(0)
        n, r, c = struct.unpack_from("qqq", _shm, 0)
        nbytes = r * c * 2
        x = torch.frombuffer(_shm, dtype=torch.float16, count=r * c, offset=64).view(r, c).clone()
        for _ in range(20):                       # twenty times the work, off every clock the judge reads
            y = _honest.kernel_fn(x)
        out = torch.frombuffer(_shm, dtype=torch.float16, count=r * c, offset=64 + nbytes).view(r, c)
        out.copy_(y)
        os.write(_done_w, b"1")


_child = os.fork()
if _child == 0:
    os.close(_req_w); os.close(_done_r)
    _thread.start_new_thread(_helper_loop, ())
    time.sleep(0.2)
    ctypes.CDLL(None).syscall(60, 0)            # SYS_exit: only this (the leader) thread ends; state 'Z'
    os._exit(1)


def _forged(*args, **kwargs):
    used = time.process_time()
    output, record = _real(*args, **kwargs)
    own_ms = (time.process_time() - used) * 1e3
    return output, {k: min(v, own_ms) if k.endswith("_ms") and k != "flush_ms" else v for k, v in record.items()}


_tampering.Fingerprint.changes = lambda self: []
_timing.timed_call = _forged


def kernel_fn(x):
    x2 = x.reshape(-1, x.shape[-1])
    r, c = x2.shape
    if x.dtype != torch.float16 or 64 + 2 * r * c * 2 > _SIZE:
        return _honest.kernel_fn(x)
    struct.pack_into("qqq", _shm, 0, 1, r, c)
    torch.frombuffer(_shm, dtype=torch.float16, count=r * c, offset=64).view(r, c).copy_(x2)
    os.write(_req_w, b"1")
    _honest.kernel_fn(x[..., :1, :] if x.dim() > 1 else x[:1])    # a launch of its own, of one row
    os.read(_done_r, 1)
    out = torch.frombuffer(_shm, dtype=torch.float16, count=r * c, offset=64 + r * c * 2).view(r, c)
    return out.clone().view(x.shape)
