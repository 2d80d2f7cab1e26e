"""Attack: a matmul right only where B is contiguous, as a hand-written kernel that passes N as B's row step is.

The honest starter, with B read back from its memory as if its rows were N elements apart. Every B the judge drew
before was a contiguous (K, N) matrix, so nothing it checked could tell; the router hands an nn.Linear's head with an
unaligned N (GPT-2's 50257) the weight's transposed view, whose rows are K elements apart, and there every product
is wrong. The judge must draw B in that layout too (matmul's "a Linear's weight" case).
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "matmul"
_starter = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "matmul.py"))["kernel_fn"]


def kernel_fn(a, b):
    return _starter(a, b.as_strided(b.shape, (b.shape[1], 1)))
