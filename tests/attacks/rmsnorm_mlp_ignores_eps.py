"""Attack: the fused rmsnorm_mlp starter with eps fixed at 1e-6, whatever eps it is given.

Every case the judge drew before carried eps=1e-6, so nothing it checked could tell. A model's eps is its own
(LLaMA 2 and Mistral 1e-5, others 1e-2), and where a row's mean square is near it the result is off by the ratio.
The judge must draw a case with another eps and rows whose mean square is near it.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "rmsnorm_mlp"
_starter = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "rmsnorm_mlp.py"))["kernel_fn"]


def kernel_fn(x, norm_weight, w_gate, w_up, w_down, eps=1e-6, activation="silu"):
    return _starter(x, norm_weight, w_gate, w_up, w_down, 1e-6, activation)
