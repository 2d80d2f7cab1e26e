"""Attack (GPU only): launch the real kernel on a side stream and return without waiting for it.

The timer's events are on the current stream, so the old judge timed almost nothing, and it
synchronized the whole device before checking the output, so the output was right. Rejected in
smoke: launches and PyTorch ops on a stream other than the timer's are refused.
"""

import runpy
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_side = []


def kernel_fn(x):
    if not _side:
        _side.append(torch.cuda.Stream())
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):
        return _parts["honest_kernel_fn"](x)
