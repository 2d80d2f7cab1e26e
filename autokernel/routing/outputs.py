"""Comparing a model's outputs: how far a routed model's output is from the original's.

Outputs are compared tensor by tensor, through tuples, lists and mappings (a Hugging Face
ModelOutput). The error of one tensor is max |actual - expected| / max |expected|: relative to the
output's scale, so logits in the hundreds and probabilities below one are held to the same bar.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping

import torch

from autokernel.core.dtypes import LIBRARY_ERROR_FACTOR, TOLERANCES, model_tolerance_of

CHUNK = 1 << 20          # elements compared at once
ERROR_DEFINITION = ("max over output tensors of max|ours - original| / max|original|, "
                    "against the output dtype's tolerance (float16 1e-2, bfloat16 2e-2, float32 1e-4; float32 "
                    f"under TF32 float16's, and never under {LIBRARY_ERROR_FACTOR:g}x PyTorch's own error from cuDNN's "
                    "TF32 convolutions)")


def tolerance(output, own_error: float = 0.0) -> float:
    """The error bar for a model output: by the dtype of its first float tensor (float32's for other dtypes).

    A float32 output under TF32 gets float16's bar (dtypes.model_tolerance_of). own_error is the error PyTorch's
    own path makes on this output where it is less exact than the dtype (tf32_convolution_error): the bar is never
    under LIBRARY_ERROR_FACTOR times it, as the judge's per-element floor, and never over float16's.
    """
    dtype = next((t.dtype for t in tensors_of(output) if t.is_floating_point()), torch.float32)
    bar = model_tolerance_of(dtype)
    return max(bar, min(TOLERANCES[torch.float16], LIBRARY_ERROR_FACTOR * own_error))


def tf32_convolution_error(model: torch.nn.Module, inputs: tuple, output) -> float:
    """How far the model's float32 output on a GPU (`output`, as PyTorch ran it) is from the same forward with
    cuDNN's convolutions exact: the error PyTorch's own path makes there, since cuDNN's float32 convolutions use
    TF32 by default. 0.0 for other outputs, where none is made. Held to float32's 1e-4 against PyTorch's TF32
    result, a float32 convolution region (problems conv2d_standard and conv2d_bn_relu on an H200, sessions 19 and
    25) was dropped for differing from it by 2.9e-4. One forward more; measured, so a model that calls
    F.conv2d itself, or a user who turned TF32 off, is measured as it runs."""
    floats = [t for t in tensors_of(output) if t.is_floating_point()]
    if not floats or floats[0].dtype != torch.float32 or floats[0].device.type != "cuda":
        return 0.0
    with exact_convolutions(), torch.no_grad():
        exact = model(*inputs)
    return output_error(exact, output)


@contextlib.contextmanager
def exact_convolutions():
    """cuDNN's float32 convolutions without TF32 inside the block; the setting as it was after it (torch 2.9's
    per-operator setting, or the older allow_tf32 before it)."""
    owner, name, exact = ((torch.backends.cudnn.conv, "fp32_precision", "ieee") if hasattr(torch.backends.cudnn, "conv")
                          else (torch.backends.cudnn, "allow_tf32", False))
    before = getattr(owner, name)
    setattr(owner, name, exact)
    try:
        yield
    finally:
        setattr(owner, name, before)


def output_error(expected, actual) -> float:
    """The largest error of any tensor in `actual` against `expected`, relative to that tensor's scale.

    A tensor's error is max |actual - expected| / max |expected| (finite entries; a scale of 0
    counts as 1). Entries equal in both (the same inf, nan in both) are exact; any other nan or
    inf, a differing number of tensors, shape or dtype, or a differing non-float tensor (ids,
    masks) is inf.
    """
    expected_tensors, actual_tensors = tensors_of(expected), tensors_of(actual)
    if len(expected_tensors) != len(actual_tensors):
        return math.inf
    return max((_tensor_error(e, a) for e, a in zip(expected_tensors, actual_tensors)), default=0.0)


def tensors_of(output) -> list[torch.Tensor]:
    """Every tensor in an output, depth first through tuples, lists and mappings."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, Mapping) else output if isinstance(output, (list, tuple)) else ()
    return [tensor for value in values for tensor in tensors_of(value)]


def detached_copy(output) -> list[torch.Tensor]:
    """The output's tensors, copied: later calls cannot overwrite them (CUDA-graph replays reuse their memory).

    A flat list compares with output_error like the structure it came from.
    """
    return [tensor.detach().clone() for tensor in tensors_of(output)]


def _tensor_error(expected: torch.Tensor, actual) -> float:
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape or actual.dtype != expected.dtype:
        return math.inf
    if not expected.is_floating_point():
        return 0.0 if torch.equal(expected, actual) else math.inf
    if expected.numel() == 0:
        return 0.0
    worst, scale = 0.0, 0.0
    # In slices of CHUNK elements: the temporaries of the comparison stay small beside outputs of gigabytes
    # (verify must fit in the memory of a forward pass and a bounded margin, issue 25).
    for e, a in zip(expected.reshape(-1).split(CHUNK), actual.reshape(-1).split(CHUNK)):
        e, a = e.float(), a.float()
        same = (e == a) | (e.isnan() & a.isnan())
        diff = torch.where(same, 0.0, (a - e).abs()).nan_to_num(nan=math.inf)
        worst = max(worst, diff.max().item())
        finite = e.abs().masked_fill(~e.isfinite(), 0.0)
        scale = max(scale, finite.max().item())
    return worst / (scale or 1.0)
