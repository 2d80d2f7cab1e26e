"""The judge's correctness checks: compare one kernel call against the oracle, and catch cheats.

bench.py runs every checked call through `check_call`, which:
- poisons fresh allocations (torch fills uninitialized memory with NaN), so elements the kernel
  never writes show up as NaN instead of whatever the allocator left there;
- counts the Triton kernels launched, so a kernel_fn that returns PyTorch's own result is rejected;
- checks the inputs are bit-for-bit unchanged afterwards;
- rejects outputs that alias an input;
- compares against the reference run in higher precision, with tolerances by dtype, where a NaN
  or Inf that the reference does not have is always a failure.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import torch

from autokernel.registry import KernelType

# atol and rtol by dtype, against a float32 (float64 for float32 kernels) oracle.
TOLERANCES = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4}


class CheckFailure(Exception):
    """The kernel computed something wrong; the message says what, where and by how much."""


class LaunchCounter:
    """Counts Triton kernel launches by wrapping JITFunction.run (and the interpreter's run).

    Kernels compiled by torch.compile (Inductor) do not go through these entry points, so wrapping
    the reference in torch.compile does not count as launching a kernel of one's own.
    """

    def __init__(self):
        self.count = 0
        self._originals = []

    def install(self) -> "LaunchCounter":
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        for cls in (JITFunction, InterpretedFunction):
            original = cls.run
            self._originals.append((cls, original))
            cls.run = self._counting(original)
        return self

    def _counting(self, original):
        counter = self

        def run(fn_self, *args, **kwargs):
            counter.count += 1
            return original(fn_self, *args, **kwargs)
        return run

    def uninstall(self) -> None:
        for cls, original in self._originals:
            cls.run = original
        self._originals.clear()


@contextlib.contextmanager
def poisoned_allocations():
    """Make torch.empty & co. return NaN-filled (float) or max-valued (int) memory."""
    import torch.utils.deterministic as det

    was_det, was_warn, was_fill = (torch.are_deterministic_algorithms_enabled(),
                                   torch.is_deterministic_algorithms_warn_only_enabled(),
                                   det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            # Deterministic mode only warns about ops without a deterministic variant; that is stage 4's job.
            warnings.simplefilter("ignore")
            yield
    finally:
        det.fill_uninitialized_memory = was_fill
        torch.use_deterministic_algorithms(was_det, warn_only=was_warn)


def oracle_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float32 else torch.float32


def upcast(inputs: dict, dtype: torch.dtype) -> dict:
    target = oracle_dtype(dtype)
    return {k: v.to(target) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()}


def snapshot(inputs: dict) -> dict:
    return {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN equals NaN with the same payload), for determinism and input checks."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    a_start = a.untyped_storage().data_ptr()
    b_start = b.untyped_storage().data_ptr()
    return a_start < b_start + b.untyped_storage().nbytes() and b_start < a_start + a.untyped_storage().nbytes()


@dataclass
class CallOutcome:
    output: torch.Tensor
    launches: int


def call_kernel(kernel_fn, inputs: dict, counter: LaunchCounter) -> CallOutcome:
    """One poisoned, counted call, with the input and aliasing checks."""
    before = snapshot(inputs)
    start = counter.count
    with poisoned_allocations():
        output = kernel_fn(**inputs)
    if output is not None and isinstance(output, torch.Tensor) and output.is_cuda:
        torch.cuda.synchronize()
    launches = counter.count - start
    if launches == 0:
        raise CheckFailure("kernel_fn launched no Triton kernel of its own: it must compute the result with its own "
                           "kernels, not return PyTorch's")
    for name, original in before.items():
        if not same_bits(original, inputs[name]):
            raise CheckFailure(f"kernel_fn modified its input {name!r} in place; inputs must be left unchanged")
    if not isinstance(output, torch.Tensor):
        raise CheckFailure(f"kernel_fn returned {type(output).__name__}, expected a torch.Tensor")
    for name, tensor in inputs.items():
        if isinstance(tensor, torch.Tensor) and _overlaps(output, tensor):
            raise CheckFailure(f"kernel_fn's output shares memory with its input {name!r}; return a fresh tensor")
    return CallOutcome(output, launches)


def compare(output: torch.Tensor, expected: torch.Tensor, oracle: torch.Tensor, dtype: torch.dtype,
            tolerance_scale: float = 1.0) -> None:
    """Raise CheckFailure unless output matches the oracle within the dtype's tolerance.

    `expected` is the reference run on the original inputs: it fixes the shape and dtype the
    kernel must return. `oracle` is the reference run on upcast inputs: it fixes the values.
    An element passes when |out - ref| <= atol + rtol * |ref|, with atol and rtol the dtype's
    tolerance. atol is in units of the output's scale (its RMS) when that exceeds 1: a product
    whose entries are in the hundreds carries rounding errors in proportion, even where one entry
    happens to cancel to near zero.
    """
    if output.shape != expected.shape:
        raise CheckFailure(f"output shape {tuple(output.shape)}, expected {tuple(expected.shape)}")
    if output.dtype != expected.dtype:
        raise CheckFailure(f"output dtype {output.dtype}, expected {expected.dtype}")
    tol = TOLERANCES[dtype] * tolerance_scale
    got = output.detach().flatten().to(torch.float64)
    want = oracle.detach().flatten().to(device=got.device, dtype=torch.float64)
    finite = torch.isfinite(want)
    scale = float(want[finite].square().mean().sqrt()) if bool(finite.any()) else 1.0
    atol = tol * max(1.0, scale)
    error = (got - want).abs()
    allowed = atol + tol * want.abs()
    nonfinite_ok = (got == want) | (torch.isnan(got) & torch.isnan(want))
    bad = torch.where(finite, ~(error <= allowed), ~nonfinite_ok)
    if not bool(bad.any()):
        return
    excess = torch.where(finite, torch.nan_to_num(error - allowed, nan=float("inf")), float("inf"))
    worst = int(torch.where(bad, excess, -float("inf")).argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape)] if expected.dim() else []
    g, w = float(got[worst]), float(want[worst])
    if not torch.isfinite(got[worst]) and bool(finite[worst]):
        what = f"{g} where the reference has {w:.6g}"
    else:
        what = f"got {g:.6g}, expected {w:.6g} (abs error {abs(g - w):.3g})"
    raise CheckFailure(f"{int(bad.sum())} of {got.numel()} elements wrong; worst at index {index}: {what}; "
                       f"tolerance atol={atol:.3g} rtol={tol:g}")


def check_case(kt: KernelType, kernel_fn, inputs: dict, dtype: torch.dtype, counter: LaunchCounter) -> torch.Tensor:
    """Call the kernel once on inputs and raise CheckFailure unless it is right. Returns its output."""
    expected = kt.reference(**inputs)
    oracle = kt.reference(**upcast(inputs, dtype))
    outcome = call_kernel(kernel_fn, inputs, counter)
    compare(outcome.output, expected, oracle, dtype, kt.tolerance_scale)
    return outcome.output
