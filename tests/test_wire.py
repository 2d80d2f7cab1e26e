"""The judge-worker message format: tensors round-trip exactly; anything malformed or too big is refused."""

import json
import socket
import struct
import threading

import pytest
import torch

from autokernel.core import wire


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _send_in_background(sock, *args):
    thread = threading.Thread(target=wire.send, args=(sock, *args), daemon=True)
    thread.start()
    return thread


def test_tensors_of_every_dtype_round_trip_bit_for_bit(pair):
    a, b = pair
    tensors = [torch.randn(3, 5).to(dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)]
    tensors += [torch.tensor(2.5), torch.empty(0, 7), torch.arange(6).reshape(2, 3), torch.tensor([True, False]),
                torch.randn(4, 6).t()]           # a 0-dim tensor, an empty one, integers, booleans, a strided view
    thread = _send_in_background(a, {"note": "hi"}, tensors)
    header, received = wire.receive(b, 1 << 20)
    thread.join()
    assert header == {"note": "hi"}
    for sent, got in zip(tensors, received, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        assert torch.equal(got.reshape(-1).view(torch.uint8) if got.numel() else got,
                           sent.contiguous().reshape(-1).view(torch.uint8) if sent.numel() else sent)


def test_tensors_over_the_limit_are_refused_unread(pair):
    a, b = pair
    thread = _send_in_background(a, {}, [torch.zeros(1000)])    # 4 kB: fits the socket's buffer
    with pytest.raises(wire.WireError, match="more than the 100 expected"):
        wire.receive(b, 100)
    thread.join()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", json.dumps({"tensors": [{"dtype": "complex64", "shape": [2]}]}).encode(),
                                  json.dumps({"tensors": [{"dtype": "float32", "shape": [-1]}]}).encode(),
                                  json.dumps({"tensors": [{"dtype": "float32", "shape": [True]}]}).encode()])
def test_malformed_headers_are_refused(pair, body):
    a, b = pair
    a.sendall(struct.pack("<Q", len(body)) + body)
    with pytest.raises(wire.WireError, match="malformed"):
        wire.receive(b, 1 << 20)


def test_an_oversized_header_and_a_closed_channel_are_refused(pair):
    a, b = pair
    a.sendall(struct.pack("<Q", wire.HEADER_LIMIT_BYTES + 1))
    with pytest.raises(wire.WireError, match="over the"):
        wire.receive(b, 0)
    a.close()
    with pytest.raises(wire.WireError, match="closed"):
        wire.receive(b, 0)
