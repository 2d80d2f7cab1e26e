"""Attack (red team): silence the worker's own tamper check first, then rewrite the timed call's record.

The worker looks for replaced attributes with Fingerprint.changes, a method of a class the kernel can reach
(autokernel.judge.candidate.worker_tampering); replaced, it sees nothing, and timing.timed_call, which the worker
looks up at every timed call, can then report a tenth of each time. On a GPU the same
replacement can send the worker's "started" just before its "idle", so the judge's own bracket agrees, and keep
flush_ms. It was a PASS with a tenth of the honest latency. Rejected in timing: the judge's own clock, from its
request (the inputs' seed drawn just then) to the proof of the output, bounds the worker's times from below.
"""
from autokernel.judge import timing as _timing
from autokernel.judge.candidate import worker_tampering as _tampering
from tests.judge_fixtures import row_softmax as _honest

KERNEL_TYPE = "softmax"
_real = _timing.timed_call


def _forged(*args, **kwargs):
    output, record = _real(*args, **kwargs)
    return output, {k: v * 0.1 if k.endswith("_ms") and k != "flush_ms" else v for k, v in record.items()}


_tampering.Fingerprint.changes = lambda self: []
_timing.timed_call = _forged


def kernel_fn(x):
    return _honest.kernel_fn(x)
