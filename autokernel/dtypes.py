"""The one home of dtype names and of the per-dtype error bars.

Every place that turns "float16" into torch.float16, or asks how much error a float16 result may
carry, reads it here: the judge (against its oracle), verify and the plug-in checks (a routed
model against the original), and the manifest's dtype lists.
"""

from __future__ import annotations

import torch

# The largest error a result of each dtype may carry, as atol and rtol against the judge's
# higher-precision oracle and as max |ours - original| / max |original| for a whole model output.
TOLERANCES = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-4}

# The dtypes AutoKernel's kernels are verified in, by their short names.
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float16 -> "float16"."""
    return str(dtype).removeprefix("torch.")


def tolerance_of(dtype: torch.dtype) -> float:
    """The error bar of a dtype; float32's for dtypes without one of their own (integers, float64)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])
