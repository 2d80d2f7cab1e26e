"""Attack (red team, round 3): do the work before the worker tells the judge "started", and time a call of nothing.

The judge's own clock ran from the worker's "started" to its "idle", both sent by the worker: with the tamper
check silenced (as in silences_the_tamper_check), timing.timed_call is wrapped so that kernel_fn runs first and the
timed call, bracket and all, returns its output at once. Every output was right, the worker's times and the judge's
bracket agreed, and both said a few microseconds: a PASS. The judge's clock now runs from its own request to the
proof of the output (elements the judge picks, sent after the call's reply), so the work is inside it whatever the
worker says: a FAIL in timing.
"""
from autokernel.judge import timing as _timing
from autokernel.judge.candidate import worker_tampering as _tampering
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_real_timed_call = _timing.timed_call


def _timed_call(clock, fn, kwargs, *args, **kw):
    if not kwargs:                          # an empty call: the bracket's own cost, left honest
        return _real_timed_call(clock, fn, kwargs, *args, **kw)
    output = fn(**kwargs)                   # the work, before "started"
    return _real_timed_call(clock, lambda: output, {}, *args, **kw)


_tampering.Fingerprint.changes = lambda self: []
_timing.timed_call = _timed_call


def kernel_fn(x):
    return _honest.kernel_fn(x)
