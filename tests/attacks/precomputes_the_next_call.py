"""Attack (red team, round 3): compute each timed call's output ahead, off the clock, from the seed it will have.

The worker drew each timed call's inputs from the case's seed plus the call's number, so the next call's inputs
were known: after each timed call (after the worker's "idle", outside the bracket the judge kept from "started" to
"idle") this kernel computes the next call's output, and kernel_fn hands it back at once. The tamper check is
silenced first (as in silences_the_tamper_check) so that correctness.case_inputs and timing.timed_call can be
wrapped: the first to learn the case, the second to work after the call. Every output was right and every time a
few microseconds: a PASS. The judge now draws each timed call's seed at random as it asks for the call, so the
output made ahead is for inputs that never come: a wrong result in timing.
"""
from autokernel.judge import correctness as _correctness, timing as _timing
from autokernel.judge.candidate import worker_tampering as _tampering
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_real_inputs, _real_timed_call = _correctness.case_inputs, _timing.timed_call
_seen: dict = {}        # the case of the inputs drawn last, its kernel type and device
_ready: list = []       # the output made ahead for the next timed call


def _inputs(kt, case, device):
    _seen.update(case=case, kt=kt, device=device)
    return _real_inputs(kt, case, device)


def _timed_call(clock, fn, kwargs, *args, **kw):
    result = _real_timed_call(clock, fn, kwargs, *args, **kw)
    if kwargs and "case" in _seen:          # a timed call of kernel_fn: the next one's output, off the clock
        ahead = {**_seen["case"], "seed": _seen["case"]["seed"] + 1}
        _ready[:] = [_honest.kernel_fn(**_real_inputs(_seen["kt"], ahead, _seen["device"]))]
    return result


_tampering.Fingerprint.changes = lambda self: []
_correctness.case_inputs = _inputs
_timing.timed_call = _timed_call


def kernel_fn(x):
    return _ready.pop() if _ready else _honest.kernel_fn(x)
