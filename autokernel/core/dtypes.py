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
# A result is never held tighter than this many times the error PyTorch's own path makes on the same input: the
# judge's per-element floor (judge/correctness.py), and a whole model's under cuDNN's TF32 (routing/outputs.py).
LIBRARY_ERROR_FACTOR = 4.0

# The dtypes AutoKernel's kernels are verified in, by their short names.
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# The other names a user may give them (--dtype fp16).
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32"}


def dtype_named(name: str) -> torch.dtype | None:
    """"fp16", "bfloat16", "FP32"... -> the torch dtype; None for a name that is not one of DTYPES'."""
    name = name.lower()
    return DTYPES.get(DTYPE_ALIASES.get(name, name))


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float16 -> "float16"."""
    return str(dtype).removeprefix("torch.")


def tolerance_of(dtype: torch.dtype) -> float:
    """The error bar of a dtype; float32's for dtypes without one of their own (integers, float64)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def pytorch_fp32_matmul_uses_tf32() -> bool:
    """Whether PyTorch's float32 matmuls may use TF32 now: torch.get_float32_matmul_precision() is
    "high" or "medium". Torch 2.9+ raises there once the per-backend API was used; then ask that."""
    try:
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:
        setting = torch.backends.cuda.matmul.fp32_precision
        return (torch.backends.fp32_precision if setting == "none" else setting) == "tf32"


def model_tolerance_of(dtype: torch.dtype) -> float:
    """The error bar of a whole model output of this dtype, as PyTorch itself computes it now.

    Under TF32 (torch.set_float32_matmul_precision("high")), PyTorch's own float32 matmuls keep 10
    mantissa bits, as float16 does: a float32 model output then carries a float16-sized error, and
    is held to float16's bar. (cuDNN's convolutions use TF32 by default whatever that setting says:
    routing/outputs.py measures what they cost a model's output.)
    """
    if dtype == torch.float32 and pytorch_fp32_matmul_uses_tf32():
        return TOLERANCES[torch.float16]
    return tolerance_of(dtype)
