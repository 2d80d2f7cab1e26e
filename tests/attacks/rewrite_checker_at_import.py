"""Attack 2: when imported, rewrite the judge's checker, wherever it can be found, then return garbage.

The old judge imported the kernel into its own process, so replacing `check_case` in bench.py
(__main__) and `compare` in autokernel.judge.correctness made every check pass. kernel_fn returns zeros
from a real Triton launch. Rejected at load: the worker watches autokernel.judge.correctness (and the
checker that decides lives in the judge's process, which the kernel never reaches).
"""

import sys

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"


def _check_case(kt, kernel_fn, inputs, *args, **kwargs):
    return kernel_fn(**inputs)          # "checked": the output is returned unseen


def _compare(*args, **kwargs):
    return None


for _name in ("__main__", "bench", "autokernel.judge.correctness"):
    _module = sys.modules.get(_name)
    for _attr, _fake in (("check_case", _check_case), ("compare", _compare)):
        if _module is not None and hasattr(_module, _attr):
            setattr(_module, _attr, _fake)


@triton.jit
def _zeros(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32).to(y_ptr.dtype.element_ty), mask=offs < n)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _zeros[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
    return y
