"""A depthwise convolution region's other starter: a direct Triton kernel, one tile of an output plane a program.

Inductor has no Triton template for a grouped convolution; a region's starter for one runs Inductor's
ordinary template on it, about 100 times slower than cuDNN (H200, session 26: 15.9 ms against 0.11 ms
for problem depthwise_conv2d), so the region could never win. A depthwise convolution (groups equal to
the input's channels, each output channel reading one input channel) is a stencil, not a GEMM: every
output is KH x KW multiply-adds over a window of its own channel's plane, and the time is in memory.
This variant computes it directly:
  - program (plane, tile row, tile column) owns a BLOCK_H x BLOCK_W tile of one output plane (an image's
    output channel); for each of the filter's taps it loads the input tile the tap reads (rows past the
    edge and the padding masked to zero, neighbouring taps served by the cache) and adds tap x input,
    in float32; then the bias, and one store in the output's dtype.
  - Only for a contiguous (NCHW) input and weight, whose output PyTorch makes contiguous, as this kernel does:
    for channels_last input the loads would stride across channels, where cuDNN's own kernel was 2.5-4x
    faster than this one (same session). Elsewhere the region keeps Inductor's starter alone.
Measured (H200, float32, 16x64x128x128, 3x3): 68 us against cuDNN's 160 us and torch.compile's 117 us.
`variant(region, device)` returns it for starter.write, or None where the region is not one such convolution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from autokernel.kernel_types.regions.graph import RegionDefinition
from autokernel.kernel_types.regions.record import Region

VARIANT = "depthwise"
CHOICES = {"dw_BLOCK_H": [1, 2, 4, 8, 16, 32, 64], "dw_BLOCK_W": [16, 32, 64, 128, 256], "dw_num_warps": [1, 2, 4, 8]}
TILE = 1024                  # outputs a program computes: about Inductor's pointwise tile
_TL_DTYPES = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}
_TORCH_DTYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float32"}


@dataclass(frozen=True)
class Geometry:
    """The convolution as the kernel needs it: sizes, the input's and weight's strides, its hyper-parameters."""
    x: str                       # kernel_fn's parameters that are the input, the weight and the bias (or None)
    weight: str
    bias: str | None
    n: int
    c: int
    h: int
    w: int
    out_channels: int
    oh: int
    ow: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    x_strides: tuple[int, ...]
    w_strides: tuple[int, ...]
    b_stride: int
    dtype: str


def _contiguous(shape: list[int]) -> tuple[int, ...]:
    return torch.empty(shape, device="meta").stride()


def read(definition: RegionDefinition) -> Geometry | None:
    """The region as one depthwise 2-D convolution of a contiguous input and weight, else None."""
    if len(definition.nodes) != 1 or definition.outputs != [definition.nodes[0].name]:
        return None
    node = definition.nodes[0]
    if node.op != "aten.convolution.default" or len(node.args) != 9:
        return None
    x, weight, bias, stride, padding, dilation, transposed, _, groups = node.args
    inputs = {i.name: i for i in definition.inputs}
    refs = [a["ref"] if isinstance(a, dict) and a.get("ref") in inputs else None for a in (x, weight, bias)]
    if refs[0] is None or refs[1] is None or (bias is not None and refs[2] is None) or transposed:
        return None
    xi, wi = inputs[refs[0]], inputs[refs[1]]
    bi = inputs[refs[2]] if refs[2] else None
    if len(xi.shape) != 4 or node.shape is None or len(node.shape) != 4 or any(
            not isinstance(v, list) or len(v) != 2 for v in (stride, padding, dilation)):     # [1] means [1, 1] to ATen
        return None
    n, c, h, w = xi.shape
    out_channels, per_group, kh, kw = wi.shape
    if groups != c or per_group != 1 or out_channels % c or min(xi.shape) < 1:
        return None
    if tuple(xi.stride) != _contiguous(xi.shape) or tuple(wi.stride) != _contiguous(wi.shape):
        return None
    if xi.dtype not in _TL_DTYPES or wi.dtype != xi.dtype or (bi is not None and bi.dtype != xi.dtype):
        return None
    _, _, oh, ow = node.shape
    return Geometry(x=xi.name, weight=wi.name, bias=bi.name if bi else None, n=n, c=c, h=h, w=w,
                    out_channels=out_channels, oh=oh, ow=ow, kh=kh, kw=kw, stride=tuple(stride),
                    padding=tuple(padding), dilation=tuple(dilation), x_strides=tuple(xi.stride),
                    w_strides=tuple(wi.stride), b_stride=bi.stride[0] if bi else 0, dtype=xi.dtype)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def plan(g: Geometry) -> dict:
    """TUNABLES: a tile as wide as the output's rows (at most 128), about TILE outputs; a strided convolution's
    loads skip elements, so its tiles are smaller (H200, session 26: 8x64 at stride 2 against 32x32's 2.5x time)."""
    block_w = min(128, max(16, _pow2(g.ow)))
    block_h = max(1, min(_pow2(g.oh), TILE // block_w // (g.stride[0] * g.stride[1])))
    return {"dw_BLOCK_H": block_h, "dw_BLOCK_W": block_w, "dw_num_warps": 4}


def variant(region: Region, device: torch.device,
            log: Callable[[str], None] = lambda line: None) -> DepthwiseVariant | None:
    """The region's direct depthwise variant, or None where the region is not one depthwise convolution that reads
    its input's planes row by row (said to log where it is a depthwise convolution all the same)."""
    g = read(region.definition)
    if g is None:
        node = region.definition.nodes[0] if len(region.definition.nodes) == 1 else None
        if node is not None and node.op == "aten.convolution.default" and node.args[-1] not in (1, None):
            log(f"{region.label}: no direct depthwise variant (not a depthwise convolution of a contiguous input "
                f"and weight); Inductor's starter alone")
        return None
    return DepthwiseVariant(g, plan(g))


class DepthwiseVariant:
    """One variant of a region's starter (starter.write calls `emit`): its kernel, TUNABLES and kernel_fn's lines."""

    def __init__(self, g: Geometry, tunables: dict):
        self.g, self.tunables = g, tunables

    def emit(self, region: Region, suffix: str, tunables: dict, choices: dict, kernels: list[str],
             legend: list[str]) -> list[str]:
        for key, value in self.tunables.items():
            tunables.setdefault(key, value)
            choices.setdefault(key, sorted(set(CHOICES[key]) | {value}))
        name = f"depthwise_plane{suffix}"
        kernels.append(_kernel(self.g, name))
        legend.append(f"#   {name}: the depthwise convolution, a tile of one output plane a program")
        return _body(self.g, name)


def _kernel(g: Geometry, name: str) -> str:
    sxn, sxc, sxh, sxw = g.x_strides
    swo, _, swh, sww = g.w_strides
    (sh, sw), (ph, pw), (dh, dw) = g.stride, g.padding, g.dilation
    lines = [
        f"def {name}(x_ptr, w_ptr, b_ptr, out_ptr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):",
        "    plane = tl.program_id(0)                  # image * output channels + output channel",
        f"    n = plane // {g.out_channels}",
        f"    oc = plane % {g.out_channels}",
        f"    ic = oc // {g.out_channels // g.c}                 # the one input channel it reads",
        "    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)",
        "    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)",
        f"    src = x_ptr + n.to(tl.int64) * {sxn} + ic.to(tl.int64) * {sxc}",
        "    acc = tl.zeros((BLOCK_H, BLOCK_W), tl.float32)",
        f"    for kh in tl.static_range({g.kh}):",
        f"        ih = oh * {sh} + (kh * {dh} - {ph})",
        f"        rows_in = (ih >= 0) & (ih < {g.h})",
        f"        for kw in tl.static_range({g.kw}):",
        f"            iw = ow * {sw} + (kw * {dw} - {pw})",
        f"            inside = rows_in[:, None] & ((iw >= 0) & (iw < {g.w}))[None, :]     # the padding reads zero",
        f"            value = tl.load(src + ih[:, None] * {sxh} + iw[None, :] * {sxw}, mask=inside, other=0.0)",
        f"            tap = tl.load(w_ptr + oc * {swo} + kh * {swh} + kw * {sww})",
        "            acc += value.to(tl.float32) * tap.to(tl.float32)",
    ]
    if g.bias:
        lines.append(f"    acc += tl.load(b_ptr + oc * {g.b_stride}).to(tl.float32)")
    lines += [f"    dst = out_ptr + plane.to(tl.int64) * {g.oh * g.ow}        # the output is contiguous (NCHW)",
              f"    tl.store(dst + oh[:, None] * {g.ow} + ow[None, :], acc.to({_TL_DTYPES[g.dtype]}),",
              f"             mask=(oh < {g.oh})[:, None] & (ow < {g.ow})[None, :])"]
    return "@triton.jit\n" + "\n".join(lines)


def _body(g: Geometry, name: str) -> list[str]:
    """kernel_fn's lines for this variant."""
    return [f"out = torch.empty(({g.n}, {g.out_channels}, {g.oh}, {g.ow}), dtype={_TORCH_DTYPES[g.dtype]}, "
            f"device={g.x}.device)",
            "block_h, block_w = TUNABLES['dw_BLOCK_H'], TUNABLES['dw_BLOCK_W']",
            f"{name}[({g.n * g.out_channels}, triton.cdiv({g.oh}, block_h), triton.cdiv({g.ow}, block_w))]("
            f"{g.x}, {g.weight}, {g.bias or g.x}, out, BLOCK_H=block_h, BLOCK_W=block_w, "
            "num_warps=TUNABLES['dw_num_warps'])",
            "return out"]
