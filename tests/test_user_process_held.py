"""The user's-process check holds what a model holds, within a memory bound (autokernel/judge/user_process.py,
HELD_BYTES): past it the oldest calls are compared once more and let go, none of their tensors may outlive the
caller's last reference, and the checks on the calls still held work as before."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: the menu's starter on CPU tensors

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.core import paths  # noqa: E402
from autokernel.core.kernel_file import import_file  # noqa: E402
from autokernel.judge import user_process  # noqa: E402
from autokernel.judge.user_process import Checker, UserProcessFailure  # noqa: E402
from tests.test_user_process import SMALL, SOFTMAX, _calls, _softmax  # noqa: E402

# One SMALL call held: its input's storage (2 x 16 float16: 64 bytes) and the reference's output, each with its copy.
CALL_BYTES = 4 * 64


def test_past_the_held_bytes_the_oldest_calls_are_let_go_and_the_latest_window_stays(monkeypatch):
    """A region's check runs at the model's own shape: 2000 calls held ran an H200 out of memory (session 26)."""
    monkeypatch.setattr(user_process, "HELD_BYTES", 12 * CALL_BYTES)
    checker = _calls(_softmax, 40)
    assert checker.calls == 40 and len(checker.held) == 12 and checker.held_bytes == 12 * CALL_BYTES
    assert checker.held[0][0].startswith("call 29 ") and len(checker.spans) == len(checker.starts) == 24
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)          # never fewer than the window
    assert len(_calls(_softmax, 20).held) == user_process.HELD_WINDOW


def test_an_honest_triton_kernel_is_let_go_without_a_trace(monkeypatch):
    """The menu's softmax starter, run by Triton (the interpreter here), keeps no reference to what it was given."""
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)
    kernel_fn = import_file(paths.starter_path("softmax"), "held_softmax_starter").kernel_fn
    checker = _calls(kernel_fn, 14)
    assert len(checker.held) == user_process.HELD_WINDOW and len(checker.spans) == 2 * user_process.HELD_WINDOW


@pytest.mark.parametrize("length, caught", [
    (user_process.HELD_WINDOW, r"call 9 .*output 0 shares memory with output 0 of call 1"),      # within the held
    (user_process.HELD_WINDOW + 1, r"after call 9 .*output 0 of call 1 .*outlived"),             # past them (review)
])
def test_a_ring_of_outputs_is_seen_within_the_held_calls_or_when_its_first_is_let_go(length, caught, monkeypatch):
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)
    ring = [torch.empty(SMALL["M"], SMALL["N"], dtype=torch.float16) for _ in range(length)]

    def cycles(x):
        out = ring[cycles.calls % len(ring)]
        cycles.calls += 1
        return out.copy_(_softmax(x))
    cycles.calls = 0
    with pytest.raises(UserProcessFailure, match=caught):
        _calls(cycles, 20)


def test_an_input_kept_to_be_returned_later_is_seen_when_its_call_is_let_go(monkeypatch):
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)
    kept = []

    def hands_back(x):
        kept.append(x)
        if len(kept) > 10:
            return kept.pop(0).copy_(_softmax(x))
        return _softmax(x)
    with pytest.raises(UserProcessFailure, match=r"after call 9 .*the input 'x' of call 1 .*outlived"):
        _calls(hands_back, 20)


def test_outputs_on_huge_storages_do_not_shrink_what_is_held():
    """Held bytes are counted from the inputs and the reference's outputs: a kernel whose outputs are views into
    160 MiB buffers (never touched, so costing nothing on a CPU) still has every call held, and its ring is seen."""
    ring = [torch.empty((160 << 20) // 2, dtype=torch.float16) for _ in range(user_process.HELD_WINDOW + 1)]

    def inflated(x):
        out = ring[inflated.calls % len(ring)][:x.numel()].view(x.shape)
        inflated.calls += 1
        return out.copy_(_softmax(x))
    inflated.calls = 0
    with pytest.raises(UserProcessFailure, match=r"call 10 .*output 0 shares memory with output 0 of call 1"):
        _calls(inflated, 30)


def test_an_input_storage_shared_by_several_calls_leaves_no_span_behind(monkeypatch):
    """One table for calls 1-12, then fresh ones: once every call that held it is let go, its span goes too, so
    memory the allocator hands out again is not taken for it (the review's false failure of an honest kernel)."""
    monkeypatch.setattr(user_process, "HELD_BYTES", 0)
    checker = Checker(SOFTMAX, torch.float16, "cpu", seed=5)
    made, shared = checker._inputs, {}

    def inputs(kt, case, device):
        fresh = made(kt, case, device)
        if checker.calls <= 12:
            return {"x": shared.setdefault("x", fresh["x"])}
        shared.clear()
        return fresh
    checker._inputs = inputs
    for _ in range(60):
        checker.call(_softmax, SMALL, None, "test")
    assert len(checker.spans) == len(checker.span_holders) == 2 * user_process.HELD_WINDOW


def test_a_write_into_an_output_past_the_window_is_seen_when_its_call_is_let_go(monkeypatch):
    monkeypatch.setattr(user_process, "HELD_BYTES", 12 * CALL_BYTES)
    fifth = []

    def writes_back(x):
        writes_back.calls += 1
        out = _softmax(x)
        if writes_back.calls == 5:
            fifth.append(out)
        if writes_back.calls == 16:
            fifth[0].fill_(0.5)             # call 5's output: outside the window of 8, still held
        return out
    writes_back.calls = 0
    with pytest.raises(UserProcessFailure, match=r"after call 17 .*output 0 of call 5 .*changed"):
        _calls(writes_back, 30)
