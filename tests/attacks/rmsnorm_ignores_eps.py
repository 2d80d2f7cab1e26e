"""Attack: RMSNorm that ignores the eps it is given and uses the judge's.

The honest starter, called with eps fixed at 1e-6 (a constexpr is one specialization fewer, and
the judge's inputs always carry eps=1e-6, so nothing it checks can tell). A model's eps is its
own: LLaMA 2, Mistral and LLaMA 3 use 1e-5, others 1e-12 or 1e-2. Where a row's mean square is
near eps the result is off by the ratio of the two: a LLaMA 2 token embedding has a standard
deviation near 0.01 (mean square 1e-4), and rsqrt(1e-4 + 1e-6) is 4.4% above rsqrt(1e-4 + 1e-5),
twice the bfloat16 tolerance, on every element of the first layer's norm. The same goes for a
layernorm that ignores its eps. The judge must vary eps between cases (1e-5, 1e-6, 1e-12, a
large one) and draw rows whose mean square is near it.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "rmsnorm"
_starter = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "rmsnorm.py"))["kernel_fn"]


def kernel_fn(x, weight, eps=1e-6, dim=-1):
    return _starter(x, weight, 1e-6, dim)
