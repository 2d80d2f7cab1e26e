"""Without a CUDA GPU, Triton kernels run in Triton's interpreter on CPU tensors: the one switch for it.

Triton reads TRITON_INTERPRET when a kernel is decorated, that is when a kernel file is imported,
and torch._dynamo (torch.compile) imports triton early. So every entry point calls `choose()`
first, before it imports anything that imports triton: bench.py's worker (the judge itself runs no
Triton), verify.py, profile.py, `autokernel optimize`, and the Python API's optimize() and
plug_in(). Nothing switches it as a side effect of an import.
"""

from __future__ import annotations

import os
import sys

_CHOSEN_TOO_LATE = False


def choose() -> bool:
    """Switch Triton to its interpreter when there is no CUDA GPU; returns whether the interpreter is on."""
    global _CHOSEN_TOO_LATE
    import torch

    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        _CHOSEN_TOO_LATE = _CHOSEN_TOO_LATE or "triton" in sys.modules
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET") == "1"


def problem() -> str | None:
    """Why the kernels cannot run here, when the switch came after triton was imported; None when all is well."""
    if _CHOSEN_TOO_LATE:
        return ("there is no CUDA GPU, so the kernels must run in Triton's interpreter, but triton was imported "
                "before autokernel could switch it on: set TRITON_INTERPRET=1 in the environment, or import "
                "autokernel before torch.compile / triton")
    return None
