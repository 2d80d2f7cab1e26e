"""Attack (red team): return PyTorch's result, computed in a thread of kernel_fn's own, after a decoy launch.

The worker's guard against library compute (worker_guards.NoLibraryCompute) is a TorchDispatchMode, and
PyTorch keeps dispatch modes per thread: a thread started inside kernel_fn runs torch.softmax unseen. The
thread is joined before kernel_fn returns, so no thread is left running. On a GPU the same thread could run
torch.compile's kernels or cuBLAS and pass for the kernel's own work. Rejected in smoke: the worker refuses a
Python thread started inside kernel_fn (worker_guards.NoThreads); the source check refuses threading too.
"""

import runpy
import threading
from pathlib import Path

import torch

_parts = runpy.run_path(str(Path(__file__).with_name("_parts.py")))
KERNEL_TYPE = "softmax"


def kernel_fn(x):
    _parts["launch_decoy"](x.device)
    result = []
    worker = threading.Thread(target=lambda: result.append(torch.softmax(x, dim=-1)))
    worker.start()
    worker.join()
    return result[0]
