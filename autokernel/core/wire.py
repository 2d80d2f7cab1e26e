"""The message format between the judge (bench.py) and the candidate's worker process.

A message is an 8-byte little-endian length, a JSON object of that many bytes, and then the raw
bytes of each tensor the JSON lists under "tensors" ({"dtype": ..., "shape": [...]}) in order.
Nothing is ever unpickled: the judge reads what the worker sends as untrusted data, checks every
size against its limits before reading, and computes each tensor's byte count itself.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Sequence

import torch

HEADER_LIMIT_BYTES = 1 << 20
WIRE_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool)}
_LENGTH = struct.Struct("<Q")


class WireError(Exception):
    """The other side sent something that is not a well-formed message, or hung up."""


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().contiguous().cpu().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def send(sock: socket.socket, header: dict, tensors: Sequence[torch.Tensor] = ()) -> None:
    meta = []
    for tensor in tensors:
        name = str(tensor.dtype).removeprefix("torch.")
        if name not in WIRE_DTYPES:
            raise WireError(f"cannot send a tensor of dtype {tensor.dtype}")
        meta.append({"dtype": name, "shape": list(tensor.shape)})
    body = json.dumps({**header, "tensors": meta}).encode()
    sock.sendall(_LENGTH.pack(len(body)) + body)
    for tensor in tensors:
        sock.sendall(tensor_bytes(tensor))


def _read_exactly(sock: socket.socket, buffer) -> None:
    view, done = memoryview(buffer), 0
    while done < len(view):
        got = sock.recv_into(view[done:])
        if got == 0:
            raise WireError("the other side closed the connection")
        done += got


def _numel(shape) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def receive(sock: socket.socket, tensor_limit_bytes: int) -> tuple[dict, list[torch.Tensor]]:
    """One message; tensors larger than tensor_limit_bytes in total are refused unread."""
    length = bytearray(_LENGTH.size)
    _read_exactly(sock, length)
    (size,) = _LENGTH.unpack(bytes(length))
    if size > HEADER_LIMIT_BYTES:
        raise WireError(f"message header of {size} bytes is over the {HEADER_LIMIT_BYTES}-byte limit")
    body = bytearray(size)
    _read_exactly(sock, body)
    try:
        header = json.loads(body.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"malformed message header: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
        raise WireError("malformed message header: expected a JSON object with a list of tensors")
    specs, total = [], 0
    for spec in header.pop("tensors", []):
        dtype = WIRE_DTYPES.get(spec.get("dtype")) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if dtype is None or not isinstance(shape, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**40 for s in shape):
            raise WireError(f"malformed tensor description {spec!r}")
        nbytes = _numel(shape) * torch.empty((), dtype=dtype).element_size()
        specs.append((dtype, shape, nbytes))
        total += nbytes
    if total > tensor_limit_bytes:
        raise WireError(f"the worker sent {total} bytes of tensors, more than the {tensor_limit_bytes} expected")
    tensors = []
    for dtype, shape, nbytes in specs:
        if nbytes == 0:
            tensors.append(torch.empty(shape, dtype=dtype))
            continue
        raw = bytearray(nbytes)
        _read_exactly(sock, raw)
        tensors.append(torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape))
    return header, tensors
