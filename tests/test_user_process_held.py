"""The user's-process check holds what a model holds, within a memory bound (autokernel/judge/user_process.py,
HELD_BYTES): past it the oldest calls are compared once more and let go, and the checks on the calls still held work
as before."""

import pytest
import torch

from autokernel.judge import user_process
from autokernel.judge.user_process import UserProcessFailure
from tests.test_user_process import SMALL, _calls, _softmax

# One SMALL call held: its input and output (2 x 16 float16, a storage of 64 bytes each) and their copies.
CALL_BYTES = 4 * 64


def test_past_the_held_bytes_the_oldest_calls_are_let_go_and_the_latest_window_stays(monkeypatch):
    """A region's check runs at the model's own shape: 2000 calls held ran an H200 out of memory (session 26)."""
    monkeypatch.setattr(user_process, "HELD_BYTES", 12 * CALL_BYTES)
    checker = _calls(_softmax, 40)
    assert checker.calls == 40 and len(checker.held) == 12 and checker.held_bytes == 12 * CALL_BYTES
    assert checker.held[0][0].startswith("call 29 ") and len(checker.spans) == len(checker.starts) == 24
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)          # never fewer than the window
    assert len(_calls(_softmax, 20).held) == user_process.HELD_WINDOW


def test_with_calls_let_go_a_ring_of_outputs_within_the_held_calls_is_still_seen(monkeypatch):
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)
    ring = [torch.empty(SMALL["M"], SMALL["N"], dtype=torch.float16) for _ in range(user_process.HELD_WINDOW)]

    def cycles(x):
        out = ring[cycles.calls % len(ring)]
        cycles.calls += 1
        return out.copy_(_softmax(x))
    cycles.calls = 0
    with pytest.raises(UserProcessFailure, match=r"call 9 .*output 0 shares memory with output 0 of call 1"):
        _calls(cycles, 20)


def test_a_write_into_an_output_past_the_window_is_seen_when_its_call_is_let_go(monkeypatch):
    monkeypatch.setattr(user_process, "HELD_BYTES", 12 * CALL_BYTES)
    returned = []

    def writes_back(x):
        out = _softmax(x)
        if len(returned) == 15:
            returned[4].fill_(0.5)          # call 5's output: outside the window of 8, still held
        returned.append(out)
        return out
    with pytest.raises(UserProcessFailure, match=r"after call 17 .*output 0 of call 5 .*changed"):
        _calls(writes_back, 30)
