"""Attack: values from the starter's Triton kernel, indices from PyTorch (torch.argmax / torch.argmin).

The kernel launches Triton kernels of its own, so a judge that only counts launches passes it, and
its indices are PyTorch's, so they are right. Rejected at its first max_dim or min_dim call:
inside kernel_fn PyTorch may only allocate, view, copy and convert.
"""

import runpy
from pathlib import Path

import torch

KERNEL_TYPE = "reduce"
kernel_fn = runpy.run_path(str(Path(__file__).with_name("_reduce_parts.py")))["kernel_fn_changing_pairs"](
    lambda x, dim, op, values, _: (values, (torch.argmax if op == "max_dim" else torch.argmin)(x, dim)))
