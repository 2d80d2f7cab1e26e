"""Attack (red team): put a relay of the kernel's own between the judge and its worker, and rewrite the timings.

At import the kernel finds the worker's end of the judge's socket (--fd in its command line), forks a relay
process that keeps that socket, and puts one end of a new socket pair in its place (os.dup2): every message
between the worker and the judge now passes through the relay. The relay passes outputs on unchanged (they
are correct: the honest kernel computes them) and rewrites each timed call's record to a tenth of its times.
On a GPU it would also hold the worker's "started" until its "idle", so the judge's own bracket agrees. The relay
ends with the connection, before the judge writes its verdict, so no process is left over. It was a PASS with a
tenth of the honest latency. Rejected at load: the worker must be the candidate's only process whenever it answers
the judge (judge_link.CandidateWorker.check_alone); the judge's own clock would reject the timings too.
"""

import ctypes
import json
import os
import select
import signal
import socket
import struct
import sys

from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
         "uint8": 1, "bool": 1}


def _exactly(sock, count):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _message(sock):
    header = json.loads(_exactly(sock, struct.unpack("<Q", _exactly(sock, 8))[0]))
    raw = b"".join(_exactly(sock, _SIZE[t["dtype"]] * _numel(t["shape"])) for t in header.get("tensors", []))
    return header, raw


def _numel(shape):
    count = 1
    for size in shape:
        count *= size
    return count


def _send(sock, header, raw):
    body = json.dumps(header).encode()
    sock.sendall(struct.pack("<Q", len(body)) + body + raw)


def _relay(judge, worker):
    while True:
        for sock in select.select([judge, worker], [], [])[0]:
            header, raw = _message(sock)
            if sock is worker and isinstance(header.get("record"), dict):
                header["record"] = {k: v * 0.1 if k.endswith("_ms") and k != "flush_ms" else v
                                    for k, v in header["record"].items()}
            _send(worker if sock is judge else judge, header, raw)


_fd = int(sys.argv[sys.argv.index("--fd") + 1])
_theirs, _ours = socket.socketpair()
if os.fork() == 0:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)                 # dies with the worker, whatever happens
    _theirs.close()
    try:
        _relay(socket.socket(fileno=os.dup(_fd)), _ours)
    except (EOFError, OSError):
        pass
    os._exit(0)
os.dup2(_theirs.fileno(), _fd)                                  # the worker now talks to the relay
_theirs.close()
_ours.close()


def kernel_fn(x):
    return _honest.kernel_fn(x)
