"""What the kernel file may not change in its process: the worker's objects (Fingerprint), torch's global
settings (global_state), and the audit hook that refuses reaching into the process."""

import subprocess
import sys
import textwrap
import time

import torch

from autokernel.judge.candidate.worker_tampering import Fingerprint, global_state, state_changes


def _timer():
    return 1.0


class _Timer:
    def read(self):
        return 1.0


def test_fingerprint_sees_replaced_rewritten_and_added_attributes():
    import types
    module = types.ModuleType("judge_part")
    module.timer = _timer
    fingerprint = Fingerprint({"judge_part": module, "_Timer": _Timer, "time": (time, ("perf_counter",))})
    assert fingerprint.changes() == []
    module.timer = lambda: 0.0
    original_read = _Timer.read
    _Timer.read = lambda self: 0.0
    module.len = lambda x: 0                 # shadows a builtin inside the module
    try:
        assert sorted(fingerprint.changes()) == ["added judge_part.len", "replaced _Timer.read",
                                                 "replaced judge_part.timer"]
    finally:
        _Timer.read = original_read


def test_fingerprint_sees_a_functions_defaults_changed_in_place():
    # (Swapping its __code__ is refused outright by the audit hook: see the last test.)
    def measure(scale=1.0):
        return scale
    holder = type("Holder", (), {"measure": staticmethod(measure)})
    fingerprint = Fingerprint({"holder": holder})
    measure.__defaults__ = (0.0,)
    assert fingerprint.changes() == ["replaced holder.measure"]


def test_global_state_changes_are_named():
    before = global_state()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        changes = state_changes(before, global_state())
    finally:
        torch.set_float32_matmul_precision(precision)
    assert f"torch.get_float32_matmul_precision() {precision!r} -> 'medium'" in changes
    assert "torch.backends.cuda.matmul.allow_tf32 False -> True" in changes     # the same setting, seen twice
    assert state_changes(before, global_state()) == []


def test_audit_hook_refuses_reaching_into_the_process():
    # An audit hook cannot be removed, so this runs in a process of its own.
    code = textwrap.dedent("""
        import gc, sys
        from autokernel.judge.candidate import worker_guards as guards, worker_tampering as tampering
        sys.addaudithook(tampering.refuse_introspection)
        for attempt in (gc.get_objects, lambda: gc.get_referrers(sys), lambda: sys.settrace(None),
                        lambda: setattr(tampering.global_state, "__code__", (lambda: {}).__code__)):
            try:
                attempt()
                print("ALLOWED")
            except PermissionError as exc:
                print("REFUSED", exc)
        print("NOTED", len(guards.VIOLATIONS.notes))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["REFUSED"] * 4 + ["NOTED"], proc.stderr
    assert "the kernel called gc.get_objects" in lines[0]
    assert lines[-1] == "NOTED 4"
