"""What each ATen op of a captured graph is to the region partitioner: its kind, what its inputs may hold, its work.

A captured graph (autokernel/kernel_types/regions/capture.py) is ATen ops as PyTorch eager dispatches them. The
partitioner (partition.py) groups the ops one generated kernel can compute together:
  - pointwise ops (torch.Tag.pointwise, and dtype casts and constants), reductions, normalizations
    (softmax, log-softmax, layer, group and batch norm in inference), scans (cumsum...), indexing
    (gather, embedding, cat, padding...) and views (which move no data) are fusible;
  - pooling (max, average, adaptive) is fusible: a windowed reduction Inductor writes as its own loops;
  - a GEMM (mm, addmm, bmm, baddbmm) or a convolution is a library call: fusible only as the head of an
    epilogue that reads its output (a convolution with its bias, batch norm and activation), and a
    convolution with no such epilogue is a region of its own, so that a CNN's time is planned;
  - everything else (attention, random ops, data-dependent shapes) is a barrier.
The domain of an input is what values an op needs to be defined on it (a log's input positive, an
embedding's indices within its table), so that generated inputs never make the reference NaN.
"""

from __future__ import annotations

import math
import operator

import torch

VIEW, POINTWISE, REDUCTION, NORM, SCAN, INDEX, POOL, GEMM, CONV, OTHER = (
    "view", "pointwise", "reduction", "normalization", "scan", "indexing", "pooling", "gemm", "convolution", "other")
COMPUTE_KINDS = (POINTWISE, REDUCTION, NORM, SCAN, INDEX, POOL, GEMM, CONV)
HEADS = (GEMM, CONV)           # library calls: at most one per region, at its head

# Ops are named as "packet.overload" (the part after aten.): one table each, by packet name.
_VIEWS = {"view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
          "slice", "select", "alias", "detach", "lift_fresh_copy", "clone", "contiguous", "as_strided",
          "split", "split_with_sizes", "chunk", "unbind", "narrow", "_reshape_alias", "diagonal", "expand_as",
          "view_as", "unflatten", "flatten", "movedim", "squeeze_copy", "unsqueeze_copy", "view_copy",
          "permute_copy", "expand_copy", "alias_copy", "t_copy", "transpose_copy", "slice_copy", "select_copy"}
_POINTWISE_EXTRA = {"_to_copy", "to", "type_as", "full", "full_like", "zeros_like", "ones_like", "zeros", "ones",
                    "scalar_tensor", "fill", "empty_like", "where", "masked_fill", "clamp", "clamp_min", "clamp_max",
                    "tril", "triu", "_conj", "resolve_conj", "resolve_neg", "copy"}
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "var_mean", "std",
               "std_mean", "logsumexp", "linalg_vector_norm", "norm", "any", "all", "count_nonzero", "aminmax"}
_NORMS = {"_softmax", "_log_softmax", "softmax", "log_softmax", "_safe_softmax", "native_layer_norm",
          "native_group_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
          "native_batch_norm", "layer_norm", "group_norm", "rms_norm", "_fused_rms_norm"}
_SCANS = {"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"}
_INDEXING = {"index", "gather", "index_select", "embedding", "cat", "stack", "constant_pad_nd", "slice_scatter",
             "select_scatter", "index_put", "scatter", "scatter_add", "arange", "iota", "repeat", "roll", "flip",
             "take_along_dim", "pad", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
             "replication_pad2d", "diagonal_scatter", "as_strided_scatter", "index_add", "index_copy",
             "masked_scatter"}
_GEMMS = {"mm", "addmm", "bmm", "baddbmm"}
_CONVOLUTIONS = {"convolution", "_convolution"}
_POOLING = {"max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
            "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
            "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool1d",
            "adaptive_max_pool2d", "adaptive_max_pool3d", "_low_memory_max_pool_with_offsets"}
# Random ops: a reference that draws random numbers cannot be compared; data-dependent output shapes
# cannot be one kernel of fixed shapes.
_NEVER = {"bernoulli", "native_dropout", "dropout", "rand", "randn", "rand_like", "randn_like", "randint",
          "randint_like", "normal", "uniform", "exponential", "multinomial", "nonzero", "masked_select", "unique",
          "_unique2", "item", "_local_scalar_dense", "empty", "empty_strided"}
# Views that move no data (not a clone, a copy or a contiguous): at a region's output they are left outside it.
_ALIASES = _VIEWS - {"clone", "contiguous", "lift_fresh_copy", "split", "split_with_sizes", "chunk", "unbind"} - {
    name for name in _VIEWS if name.endswith("_copy")}
# Ops that may read only part of an input (a slice, rows of a table): its bytes are not all moved.
_SUBSETTING = {"slice", "select", "narrow", "as_strided", "diagonal", "index", "gather", "index_select",
               "embedding", "take_along_dim", "split", "split_with_sizes", "chunk", "unbind", "slice_copy",
               "select_copy"}

# Arguments whose values must lie in a domain for the op to be defined: packet -> {argument index: domain}.
POSITIVE, NONZERO, UNIT, ABOVE_MINUS_ONE, AT_LEAST_ONE, PROBABILITY, REAL = (
    "positive", "nonzero", "unit", "above-1", "at-least-1", "probability", "real")
_DOMAINS = {"log": {0: POSITIVE}, "log2": {0: POSITIVE}, "log10": {0: POSITIVE}, "sqrt": {0: POSITIVE},
            "rsqrt": {0: POSITIVE}, "reciprocal": {0: NONZERO}, "div": {1: NONZERO}, "lgamma": {0: POSITIVE},
            "digamma": {0: POSITIVE}, "log1p": {0: ABOVE_MINUS_ONE}, "asin": {0: UNIT}, "acos": {0: UNIT},
            "atanh": {0: UNIT}, "erfinv": {0: UNIT}, "acosh": {0: AT_LEAST_ONE}, "logit": {0: PROBABILITY},
            "binary_cross_entropy": {0: PROBABILITY, 1: PROBABILITY}, "xlogy": {1: POSITIVE},
            "fmod": {1: NONZERO}, "remainder": {1: NONZERO}, "floor_divide": {1: NONZERO},
            "special_xlog1py": {1: ABOVE_MINUS_ONE}, "polygamma": {1: POSITIVE},
            # batch norm in inference: (input, weight, bias, running_mean, running_var, ...), rsqrt(var + eps)
            "native_batch_norm": {4: POSITIVE}, "_native_batch_norm_legit_no_training": {4: POSITIVE},
            "_native_batch_norm_legit": {4: POSITIVE}}


def op_name(target) -> str:
    """An ATen op as the region files write it: "aten.sigmoid.default"; operator.getitem as "getitem"."""
    if target is operator.getitem:
        return "getitem"
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    raise ValueError(f"{target!r} is not an ATen op")


def packet(name: str) -> str:
    """"aten.sigmoid.default" -> "sigmoid"."""
    return name.split(".")[1] if name.count(".") >= 2 else name


def resolve(name: str):
    """The op a region file names; only ATen and prims ops (and getitem) can be named, so a file runs no other code."""
    if name == "getitem":
        return operator.getitem
    parts = name.split(".")
    if len(parts) != 3 or parts[0] not in ("aten", "prims"):
        raise ValueError(f"a region names only aten and prims ops, not {name!r}")
    namespace = getattr(torch.ops, parts[0])
    return getattr(getattr(namespace, parts[1]), parts[2])


def kind(target) -> str:
    """The partitioner's kind of an op (the constants above)."""
    if target is operator.getitem:
        return VIEW
    if not isinstance(target, torch._ops.OpOverload) or target.namespace not in ("aten", "prims"):
        return OTHER
    name = target._opname
    if name in _NEVER or torch.Tag.nondeterministic_seeded in target.tags:
        return OTHER
    if name in _VIEWS:
        return VIEW
    if name in _GEMMS:
        return GEMM
    if name in _CONVOLUTIONS:
        return CONV
    if name in _POOLING:
        return POOL
    if name in _REDUCTIONS:
        return REDUCTION
    if name in _NORMS:
        return NORM
    if name in _SCANS:
        return SCAN
    if name in _INDEXING:
        return INDEX
    if torch.Tag.pointwise in target.tags or name in _POINTWISE_EXTRA or target.namespace == "prims":
        return POINTWISE
    return OTHER


def argument_domain(name: str, index: int) -> str | None:
    """The domain an op needs of its positional argument `index` ("aten.log.default", 0 -> "positive"), or None."""
    return _DOMAINS.get(packet(name), {}).get(index)


def aliases(target) -> bool:
    """Whether the op is a view that moves no data (a reshape, permute, select...)."""
    return isinstance(target, torch._ops.OpOverload) and target.namespace == "aten" and target._opname in _ALIASES


def subsets(name: str) -> bool:
    """Whether the op may read only part of its first input."""
    return packet(name) in _SUBSETTING


def head_flops(name: str, shapes: list[list[int]], out_shape: list[int], args: list | None = None) -> float:
    """2 * the multiply-adds of a GEMM or a convolution, from its inputs' shapes, its output's and (a convolution's
    `transposed`) its arguments."""
    if packet(name) in _CONVOLUTIONS:
        # weight is (C_out, C_in / groups, *kernel): each output element meets weight[0]'s elements once; transposed
        # it is (C_in, C_out / groups, *kernel), met once by each input element
        transposed = bool(args[6]) if args is not None and len(args) > 6 else False
        data, weight = shapes[0], shapes[1]
        return 2.0 * math.prod(data if transposed else out_shape) * math.prod(weight[1:])
    first = shapes[1] if packet(name) in ("addmm", "baddbmm") else shapes[0]
    return 2.0 * math.prod(out_shape) * (first[-1] if first else 1)
