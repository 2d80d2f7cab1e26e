"""Attack: change torch's global numerics when imported (TF32 matmuls, fewer CPU threads).

In the old judge this leaked into the reference (and its timing) in the same process, and in a
user's model it leaks into every other layer. Rejected at load: the worker compares torch's
global state before and after the import.
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
kernel_fn = _parts["honest_kernel_fn"]

torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("medium")
