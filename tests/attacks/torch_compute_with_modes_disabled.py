"""Attack (red team): return PyTorch's result, computed with the worker's dispatch mode set aside for the moment.

torch.utils._python_dispatch._disable_current_modes pops every dispatch mode and pushes them back on the way
out, so the worker's guard (worker_guards.NoLibraryCompute) never sees torch.softmax, and the mode stack is
as it was when kernel_fn returns (the global-state check sees nothing). torch._C._DisableTorchDispatch does
the same by turning Python dispatch off (the second branch, chosen by call parity, so both run in smoke). The
worker's runtime guards do not see it (docs/threats.md says why): the source check refuses it at load
(tests/attacks/expected.py SOURCE_CHECK_ONLY).
"""

import runpy
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"
_calls = [0]


def kernel_fn(x):
    _parts["launch_decoy"](x.device)
    _calls[0] += 1
    with _disable_current_modes() if _calls[0] % 2 else torch._C._DisableTorchDispatch():
        return torch.softmax(x, dim=-1)
