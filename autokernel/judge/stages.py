"""The judge's five correctness stages, and the Judge that one bench run passes to each.

What each stage checks is in autokernel/judge/bench.py's docstring (the judge's own page); the first failure ends
the run. The worker (autokernel/judge/judge_link.py) runs kernel_fn on each case; this process makes its own copy of
the inputs, computes the reference and compares (autokernel/judge/correctness.py).
"""

from __future__ import annotations

import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # Judge and worker take turns on small CPU tensors: threads of one spinning while the other works
    # cost more than they give. (The worker runs Triton's interpreter; this process runs no Triton.)
    torch.set_num_threads(1)

from autokernel.core.dtypes import DTYPES, dtype_name  # noqa: E402
from autokernel.judge.correctness import (CheckFailure, case_inputs, compare_outputs,  # noqa: E402
                                          output_parts, reference_outputs, same_bits)
from autokernel.judge.judge_link import CandidateWorker  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from autokernel.kernel_types.base import KernelType  # noqa: E402


class Judge:
    """Everything one bench run needs: the worker, the kernel type, the device and the seeds."""

    def __init__(self, worker: CandidateWorker, kt: KernelType, args):
        self.worker = worker
        self.kt = kt
        self.args = args
        self.device = "cuda" if ON_GPU else "cpu"
        self.dtype = DTYPES[args.dtype]
        self.seed = args.seed
        self.case_index = 0

    def where(self, shape) -> str:
        """A timing shape as a failure message names it: "M=4,N=8 float16"."""
        return f"{registry.format_shape(shape)} {self.args.dtype}"

    def next_case(self, shape, dtype, adversarial=None) -> dict:
        self.case_index += 1
        return {"shape": shape, "dtype": dtype_name(dtype), "seed": self.seed + self.case_index,
                "adversarial": adversarial}

    def check(self, shape, dtype, adversarial=None, label="") -> None:
        """One case: the worker runs kernel_fn on it, this process checks the output."""
        case = self.next_case(shape, dtype, adversarial)
        expected, oracle, allowance = reference_outputs(self.kt, case_inputs(self.kt, case, self.device), dtype)
        [output] = self.worker.call(case, parts=len(output_parts(expected)), output_bytes=output_limit(expected))
        try:
            compare_outputs(output, expected, oracle, dtype, self.kt.tolerance_scale, allowance=allowance)
        except CheckFailure as failure:
            where = f"{label + ' ' if label else ''}{registry.format_shape(shape)} {dtype_name(dtype)}"
            raise CheckFailure(f"{where}: {failure}") from None

    def sweep_shapes(self) -> list[dict]:
        shapes = self.kt.sweep if ON_GPU else self.kt.cpu_sweep
        return [shapes[0], shapes[len(shapes) // 2], shapes[-1]] if self.args.quick else list(shapes)

    def edge_shapes(self) -> list[dict]:
        shapes = self.kt.edge_shapes if ON_GPU else self.kt.cpu_edge_shapes
        return shapes[:2] + shapes[-1:] if self.args.quick else list(shapes)

    def stage_dtypes(self) -> list[torch.dtype]:
        """Every dtype; --one-dtype (a baseline, a --screen) checks only the run's own: each compiles the kernel again."""
        return [self.dtype] if self.args.one_dtype else [d for d in DTYPES.values() if self.kt.supports(d)]

    def timing_shapes(self) -> list[dict]:
        if self.args.shape:
            return self.args.shape
        return [self.kt.timing_shape if ON_GPU else self.kt.cpu_sweep[-1]]


def output_limit(expected) -> int:
    """The most bytes an output may have on the wire: the reference's element count in float64, plus room
    (for each of its tensors, where it returns several)."""
    return sum(8 * part.numel() + 1024 for part in output_parts(expected))


# --------------------------------------------------------------------------- the five stages
def stage_smoke(judge: Judge) -> int:
    judge.check(judge.kt.smoke_shape, judge.dtype)
    judge.check(judge.kt.smoke_shape, judge.dtype, label="second call with fresh inputs:")
    return 2


def stage_shape_sweep(judge: Judge) -> int:
    cases = 0
    for dtype in judge.stage_dtypes():
        for shape in judge.sweep_shapes():
            judge.check(shape, dtype)
            cases += 1
    for shape in judge.args.shape:       # the model's real shapes, from an extracted job
        judge.check(shape, judge.dtype, label="job shape")
        cases += 1
    return cases


def stage_stability(judge: Judge) -> int:
    cases = 0
    for adversarial in judge.kt.adversarial:
        shape = {**judge.kt.smoke_shape, **adversarial.shape}
        for dtype in judge.stage_dtypes():
            judge.check(shape, dtype, adversarial.name, label=f"[{adversarial.name}: {adversarial.why}]")
            cases += 1
    return cases


def stage_determinism(judge: Judge) -> int:
    shape = judge.timing_shapes()[0]
    case = judge.next_case(shape, judge.dtype)
    expected, oracle, allowance = reference_outputs(judge.kt, case_inputs(judge.kt, case, judge.device),
                                                    judge.dtype)
    outputs = judge.worker.call(case, repeat=3, parts=len(output_parts(expected)), output_bytes=output_limit(expected))
    where = judge.where(shape)
    for i, output in enumerate(outputs[1:], start=2):
        for first, again in zip(outputs[0], output):
            if same_bits(first, again):
                continue
            if first.shape != again.shape or first.dtype != again.dtype:
                raise CheckFailure(f"{where}: call {i} returned a {tuple(again.shape)} {again.dtype} tensor where "
                                   f"call 1 returned a {tuple(first.shape)} {first.dtype} one")
            diff = (first.double() - again.double()).abs()
            raise CheckFailure(f"{where}: call {i} differs from call 1 on the same input values at another address "
                               f"({int((diff != 0).sum())} elements, max difference {float(diff.max()):.3g}); look "
                               "for atomics, a race, or a choice made from a data pointer")
    try:
        compare_outputs(outputs[0], expected, oracle, judge.dtype, judge.kt.tolerance_scale, allowance=allowance)
    except CheckFailure as failure:
        raise CheckFailure(f"{where}: {failure}") from None
    return 3


def stage_edge_shapes(judge: Judge) -> int:
    cases = 0
    for dtype in judge.stage_dtypes():
        for shape in judge.edge_shapes():
            judge.check(shape, dtype)
            cases += 1
    return cases


STAGES = [("smoke", stage_smoke), ("shape sweep", stage_shape_sweep), ("stability", stage_stability),
          ("determinism", stage_determinism), ("edge shapes", stage_edge_shapes)]

