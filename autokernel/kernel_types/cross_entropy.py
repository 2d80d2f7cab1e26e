"""cross_entropy: the mean cross-entropy of (M, V) logits against M integer targets. Inputs, shapes and extreme
logits; the loss's aten ops (and log_softmax beside an nll_loss) in a trace; F.cross_entropy (mean, no
weights) routed."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import Adversarial, KernelType, Reading, Recognition, Routing, randn

_LOG_SOFTMAX_OPS = {"aten::log_softmax", "aten::_log_softmax"}
IGNORE_INDEX = -100          # F.cross_entropy's default: the targets a kernel must leave out of the mean


def ce_inputs(s, dtype, gen, device, logit_scale=1.0):
    logits = randn((s["M"], s["V"]), dtype, gen, device, scale=logit_scale)
    targets = torch.randint(0, s["V"], (s["M"],), generator=gen, device=device)
    return {"logits": logits, "targets": targets}


def _extreme(s, dtype, gen, device):
    # Logits of +-1e4: the log-sum-exp must subtract the row max and accumulate in float32.
    inputs = ce_inputs(s, dtype, gen, device)
    signs = torch.randint(0, 2, (s["M"], s["V"]), generator=gen, device=device) * 2 - 1
    inputs["logits"] = (signs * 1e4 + torch.randn((s["M"], s["V"]), generator=gen, device=device)).to(dtype)
    return inputs


def _ignored(s, dtype, gen, device):
    # Like PyTorch's default, a target of IGNORE_INDEX adds nothing and leaves the mean's count: every third row here.
    # Checked by the judge, so the router needs no look at the targets on each call, and the route runs inside a
    # compiled graph (it could not while that look, a device sync, was the router's).
    inputs = ce_inputs(s, dtype, gen, device)
    inputs["targets"][::3] = IGNORE_INDEX
    return inputs


def _confident(s, dtype, gen, device):
    # A trained model's logits: offset far from zero, the target ahead of the rest by a wide margin, so the loss is
    # small against the logits. lse - x[target] then cancels: an lse rounded to the logits' dtype (a bandwidth trick)
    # is off by many times the loss, where PyTorch's float32-internal loss is right.
    inputs = ce_inputs(s, dtype, gen, device)
    logits = 20.0 + torch.randn((s["M"], s["V"]), generator=gen, device=device)
    rows = torch.arange(s["M"], device=device)
    logits[rows, inputs["targets"]] = logits.max(dim=1).values + 10.0
    inputs["logits"] = logits.to(dtype)
    return inputs


# float32's unit roundoff: the loss is computed in float32 whatever the logits' dtype (16-bit logits are upcast).
FLOAT32_UNIT = 2.0 ** -24
# Roundings at the logits' magnitude an honest float32 loss makes per row: x - max inside exp, max + log(sum) (lse),
# and lse - x[target]; one more for slack.
CANCELLATION_ROUNDINGS = 4


def cancellation_allowance(inputs, oracle, dtype) -> torch.Tensor:
    """The error an honest loss carries where the loss is small against the logits, beyond the dtype's tolerance.

    Each row's loss is lse - x[target]: two numbers of the logits' size, rounded in float32 at that size (as
    PyTorch's own kernel does), whose difference cancels where the target wins by a wide margin (a trained model).
    The dtype's tolerance is relative to the loss, so there an honest float32 kernel failed at random (CI: 7.4e-7
    off a loss of 0.0032 at logits near 30, a third of one float32 step at 30, over an allowance of 3.2e-7). Its
    error is a few roundings of |lse| + |x[target]|, averaged over the rows: about 1.4e-5 there, where an lse
    rounded to 16 bits is off by 1e-3 to 6e-2 (tests/attacks/cross_entropy_lse_in_input_dtype.py)."""
    counted = inputs["targets"] != IGNORE_INDEX
    logits = inputs["logits"].double()[counted]
    rows = torch.arange(logits.shape[0], device=logits.device)
    lse = torch.logsumexp(logits, dim=1)
    target = logits[rows, inputs["targets"][counted]]
    size = (lse.abs() + target.abs()).mean() if logits.shape[0] else lse.new_zeros(())
    return CANCELLATION_ROUNDINGS * FLOAT32_UNIT * size


# --------------------------------------------------------------------------- the profiler
def claims_op(op: str, trace_ops: set[str]) -> bool:
    """log_softmax is the loss's first half where the trace also runs an nll_loss; alone it is "other"."""
    return op in _LOG_SOFTMAX_OPS and any(name.startswith("aten::nll_loss") for name in trace_ops)


def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    logits = shapes[0]
    if not logits:
        return None
    # Classes are the last dimension of log_softmax's input and the second of the loss's logits.
    classes = logits[-1] if op in _LOG_SOFTMAX_OPS or len(logits) < 2 else logits[1]
    return {"M": math.prod(logits) // classes, "V": classes}


# --------------------------------------------------------------------------- the router
def read_cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                       reduction="mean", label_smoothing=0.0):
    if weight is not None or size_average is not None or reduce is not None or reduction != "mean" or label_smoothing:
        return "cross-entropy with class weights, label smoothing or a reduction other than mean"
    if ignore_index != IGNORE_INDEX:
        return f"cross-entropy with an ignore_index other than {IGNORE_INDEX}"
    if input.dim() != 2 or target.dim() != 1 or target.dtype != torch.int64:
        return "cross-entropy not of (M, V) logits against (M,) class indices"
    return Reading({"M": input.shape[0], "V": input.shape[1]}, (input,), _launch_cross_entropy)


def _launch_cross_entropy(fn, input, target, *args, **kwargs):
    return fn(input.contiguous(), target.contiguous()).to(input.dtype)


KERNEL_TYPE = KernelType(
    name="cross_entropy",
    profiled_ops=frozenset({"aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd",
                           "aten::nll_loss_forward", "aten::nll_loss2d"}),
    description="mean cross-entropy of (M, V) logits against M integer targets; targets of -100 are left out",
    reference=reference.cross_entropy,
    make_inputs=ce_inputs,
    smoke_shape={"M": 16, "V": 256},
    sweep=[{"M": m, "V": v} for m, v in [
        (1, 1000), (128, 32000), (1024, 50257), (2048, 32768), (4096, 8192), (512, 128256),
        (8192, 4096), (4096, 32000), (8192, 32768)]],
    cpu_sweep=[{"M": m, "V": v} for m, v in [
        (1, 64), (4, 128), (16, 256), (8, 512), (32, 32), (64, 64), (3, 1024), (2, 2048)]],
    edge_shapes=[{"M": m, "V": v} for m, v in [(1023, 1023), (17, 4097), (1537, 1537), (1, 1), (4096, 1)]],
    cpu_edge_shapes=[{"M": m, "V": v} for m, v in [(3, 1023), (2, 4097), (5, 1537), (1, 1), (7, 1)]],
    timing_shape={"M": 8192, "V": 32768},
    adversarial=[Adversarial("extreme logits", {"M": 16, "V": 1024}, _extreme, "logits of +-1e4"),
                 Adversarial("confident logits", {"M": 16, "V": 1024}, _confident,
                             "logits near 20, each target's 10 above its row's max: a small loss, lse in float32"),
                 Adversarial("ignored targets", {"M": 48, "V": 1024}, _ignored,
                             f"every third target {IGNORE_INDEX}: left out of the loss and of the mean's count")],
    bytes_moved=lambda s, e: s["M"] * s["V"] * e + s["M"] * 8.0,
    flops=lambda s: 4.0 * s["M"] * s["V"],
    error_allowance=cancellation_allowance,
    recognise=Recognition(op_shape=op_shape, claims_op=claims_op),
    route=Routing(functions={F.cross_entropy: read_cross_entropy}),
)
