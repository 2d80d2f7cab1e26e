"""Shared parts of the attack kernels (loaded with runpy; not an attack itself).

honest_kernel_fn is the minimal correct softmax of tests/judge_fixtures/row_softmax.py;
launch_decoy launches a real, tiny Triton kernel that computes nothing useful, which is how a
cheat satisfies a judge that only counts launches.
"""

import runpy
from pathlib import Path

import torch
import triton
import triton.language as tl

honest_kernel_fn = runpy.run_path(str(Path(__file__).resolve().parents[1] / "judge_fixtures" / "row_softmax.py"))[
    "kernel_fn"]


@triton.jit
def _decoy(y_ptr, BLOCK: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], dtype=tl.float32))


def launch_decoy(device) -> None:
    scratch = torch.empty(16, dtype=torch.float32, device=device)
    _decoy[(1,)](scratch, BLOCK=16)
