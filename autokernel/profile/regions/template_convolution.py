"""A region's convolution rewritten for Inductor's Triton templates, for its starter only (never its reference).

Inductor has Triton templates for 2-D and 3-D convolutions that are not transposed and have no bias
on a CPU; anything else it hands to the library (cuDNN, oneDNN), which a starter cannot be. So, in
the graph Inductor compiles for a starter (inductor.region_module):
  - a transposed convolution becomes an ordinary one on its input spread out with zeros (stride - 1
    between elements, output_padding at the end) and its weight flipped, with padding
    dilation * (kernel - 1) - padding (left to the library where that is negative);
  - a 1-D convolution becomes a 2-D one of height 1;
  - the bias is added after it (as Inductor does itself on a GPU).
Each computes the same values up to the order of a sum; the judge checks the starter against the region's
own ops as always.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def template_convolution(graph: torch.fx.Graph, shape_of, x, weight, bias, stride, padding, dilation, transposed,
                         output_padding, groups) -> torch.fx.Node:
    """The convolution aten.convolution.default(x, weight, bias, ...) as nodes of graph; shape_of(node) its shape."""
    spatial = len(stride)
    stride, padding, dilation, output_padding = map(list, (stride, padding, dilation, output_padding))
    kernel = shape_of(weight)[2:]
    widened = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    if transposed and min(widened) >= 0:
        x = _spread(graph, x, shape_of(x), stride, output_padding)
        weight = _as_forward_weight(graph, weight, shape_of(weight), groups)
        stride, padding, output_padding, transposed = [1] * spatial, widened, [0] * spatial, False
    as_2d = spatial == 1 and not transposed
    if as_2d:
        x, weight = (graph.call_function(aten.unsqueeze.default, (t, 2)) for t in (x, weight))
        stride, padding, dilation, output_padding = [1, *stride], [0, *padding], [1, *dilation], [0, *output_padding]
    out = graph.call_function(aten.convolution.default, (x, weight, None, stride, padding, dilation, transposed,
                                                         output_padding, groups))
    if as_2d:
        out = graph.call_function(aten.squeeze.dim, (out, 2))
    if bias is None:
        return out
    per_channel = graph.call_function(aten.view.default, (bias, [-1] + [1] * spatial))
    return graph.call_function(aten.add.Tensor, (out, per_channel))


def _pad_at_end(rank: int, dim: int, amount: int) -> list[int]:
    """constant_pad_nd's pad list (last dim first, (before, after) each) adding `amount` after dim."""
    pad = [0] * (2 * (rank - dim))
    pad[-1] = amount
    return pad


def _spread(graph, x, shape: list[int], stride: list[int], output_padding: list[int]):
    """x with stride - 1 zeros between its elements along each spatial dim, and output_padding zeros after them."""
    shape = list(shape)
    for index, (step, extra) in enumerate(zip(stride, output_padding)):
        dim, size = 2 + index, shape[2 + index]
        if step > 1:
            x = graph.call_function(aten.unsqueeze.default, (x, dim + 1))
            x = graph.call_function(aten.constant_pad_nd.default, (x, _pad_at_end(len(shape) + 1, dim + 1, step - 1)))
            x = graph.call_function(aten.view.default, (x, shape[:dim] + [size * step] + shape[dim + 1:]))
            x = graph.call_function(aten.slice.Tensor, (x, dim, 0, (size - 1) * step + 1))
            shape[dim] = (size - 1) * step + 1
        if extra > 0:
            x = graph.call_function(aten.constant_pad_nd.default, (x, _pad_at_end(len(shape), dim, extra)))
            shape[dim] += extra
    return x


def _as_forward_weight(graph, weight, shape: list[int], groups: int):
    """A transposed convolution's weight (C_in, C_out / groups, *kernel) as the ordinary one's (C_out, C_in / groups,
    *kernel), flipped in space."""
    c_in, c_out_group, kernel = shape[0], shape[1], shape[2:]
    spatial = list(range(2, 2 + len(kernel)))
    weight = graph.call_function(aten.flip.default, (weight, spatial))
    weight = graph.call_function(aten.view.default, (weight, [groups, c_in // groups, c_out_group, *kernel]))
    weight = graph.call_function(aten.transpose.int, (weight, 1, 2))
    return graph.call_function(aten.reshape.default, (weight, [groups * c_out_group, c_in // groups, *kernel]))
