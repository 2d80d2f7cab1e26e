"""rotary_embedding: rotate-half rotary position embedding of (B, H, S, D) with (S, D/2) cos and sin. Inputs and
shapes; in a trace, a module named like Rotary / RoPE that runs no matmul, or the model's own Python functions
named like rotary / rotate / rope (rotate_half) with the products by cos / sin and their sum written beside
them; rotary modules with cos and sin tables routed."""

from __future__ import annotations

import functools
import math
import re

import torch
from torch import nn

from autokernel.kernel_types import matmul, references as reference
from autokernel.kernel_types.base import (Adversarial, FunctionRecognition, KernelType, ModuleMatch, ModuleVariant,
                                          Reading, Recognition, Routing, bhsd, randn)

# The attribute of a rotary module that holds its cos and sin tables cut to a sequence length and
# cast to a dtype. Made on eager calls, read inside torch.compile as they are, so a compiled graph
# does not copy them on every forward.
ROTARY_TABLES = "_autokernel_rotary_tables"
_MATMUL_OPS = matmul.KERNEL_TYPE.profiled_ops      # a module that runs a matmul is no rotary


def rope_inputs(s, dtype, gen, device, x_scale=1.0):
    b, h, seq, d = s["B"], s["H"], s["S"], s["D"]
    # Tables of a random base (theta from 1e4, the textbook's, to 2e6: LLaMA 3 has 5e5, Qwen 1e6) from a random
    # position on: a kernel must rotate by the tables it is given, not recompute the textbook's from positions.
    theta = 10.0 ** (4.0 + 2.3 * float(torch.rand((), generator=gen, device=device)))
    start = int(torch.randint(0, 4096, (), generator=gen, device=device))
    inv_freq = 1.0 / (theta ** (torch.arange(0, d // 2, device=device, dtype=torch.float32) * 2 / d))
    angles = torch.arange(start, start + seq, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return {"x": randn((b, h, seq, d), dtype, gen, device, scale=x_scale),
            "cos": angles.cos().to(dtype), "sin": angles.sin().to(dtype)}


# --------------------------------------------------------------------------- the profiler
def is_rotary_name(name: str) -> bool:
    return bool(re.search(r"rotary|rotate|(?:^|_)rope(?:_|$)", name.lower()) or re.search(r"Ro[Pp][Ee](?![a-z])", name))


def largest_head_tensor(roots: list) -> tuple[int, ...] | None:
    """The largest 4-D (else 3-D) input of these ops: the (B, H, S, D) tensor being rotated."""
    candidates = [tuple(shape) for root in roots for shape in root.event.input_shapes if len(shape) in (3, 4)]
    return max(candidates, key=lambda s: (len(s), math.prod(s))) if candidates else None


def recognise_module(module: nn.Module, ops: set[str], roots: list) -> ModuleMatch | None:
    if not is_rotary_name(type(module).__name__) or ops & _MATMUL_OPS:
        return None
    return ModuleMatch("rotary_embedding", module, lambda input_shape, roots: (
        bhsd(input_shape) or bhsd(largest_head_tensor(roots))))


def is_rope_arithmetic(root, rotated: tuple[int, ...]) -> bool:
    """x * cos, rotate_half(x) * sin and their sum, written inline next to a rotate-half function that
    touched the (B, H, S, D) tensor `rotated`."""
    if root.name not in ("aten::mul", "aten::add", "aten::sub"):
        return False
    shapes = [tuple(shape) for shape in root.event.input_shapes[:2]]
    if len(shapes) < 2 or not all(shapes):
        return False     # a product with a Python number is a scale, not a rotation
    heads = {rotated, rotated[:-1] + (rotated[-1] // 2,)}
    if root.name != "aten::mul":
        return shapes[0] in heads and shapes[1] in heads
    x, table = shapes if shapes[0] in heads else shapes[::-1]
    # The cos / sin table broadcasts over batch and heads: its last two sizes are (S, width of x).
    return x in heads and len(table) >= 2 and table[-2:] == x[-2:]


# One entry per module call site, {B, H, S, D} from the largest 4-D tensor the functions touched
# (the (B, H, S, D) layout that SDPA uses is assumed).
FUNCTIONS = FunctionRecognition(is_name=is_rotary_name, touched=largest_head_tensor, joins=is_rope_arithmetic,
                                shape=lambda roots: bhsd(largest_head_tensor(roots)))


# --------------------------------------------------------------------------- the router
def module_variants(module: nn.Module, verified_shapes: list[dict]) -> list[ModuleVariant]:
    """A module named like Rotary / RoPE with (S, D/2) cos and sin tables and forward(x)."""
    buffers = dict(module.named_buffers(recurse=False))
    cos, sin = buffers.get("cos"), buffers.get("sin")
    if (not re.search(r"rotary|rope", type(module).__name__, re.IGNORECASE) or cos is None or sin is None
            or cos.dim() != 2 or cos.shape != sin.shape):
        return []
    return [ModuleVariant("rotary_embedding", "rotary_embedding", functools.partial(_read_rotary, module))]


def _read_rotary(module: nn.Module, x) -> Reading | str:
    cos = module.cos
    if x.dim() != 4 or x.shape[-1] != 2 * cos.shape[-1] or x.shape[-2] > cos.shape[0]:
        return "input is not (B, H, S, D) with D twice the table width and S within the tables"
    batch, heads, seq, head_dim = x.shape

    def launch(fn, x):
        cos, sin = rotary_tables(module, x.shape[-2], x.dtype)
        return fn(x.contiguous(), cos, sin)
    return Reading({"B": batch, "H": heads, "S": seq, "D": head_dim}, (x,), launch)


def rotary_tables(module: nn.Module, seq: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's cos and sin tables for `seq` positions in `dtype`, contiguous, kept on the module."""
    if torch.compiler.is_compiling():      # the tables an eager call kept (a version is no graph constant)
        kept = module.__dict__.get(ROTARY_TABLES)
        if kept is not None and kept[0] == (dtype, seq):
            return kept[2]
        return module.cos[:seq].to(dtype).contiguous(), module.sin[:seq].to(dtype).contiguous()
    versions = (module.cos._version, module.sin._version)
    kept = module.__dict__.get(ROTARY_TABLES)
    if kept is None or kept[0] != (dtype, seq) or kept[1] != versions:
        kept = ((dtype, seq), versions, (module.cos[:seq].to(dtype).contiguous(),
                                         module.sin[:seq].to(dtype).contiguous()))
        module.__dict__[ROTARY_TABLES] = kept
    return kept[2]


KERNEL_TYPE = KernelType(
    name="rotary_embedding",
    description="rotary position embedding (rotate-half) of (B, H, S, D) with (S, D/2) cos and sin",
    reference=reference.rotary_embedding,
    make_inputs=rope_inputs,
    smoke_shape={"B": 1, "H": 2, "S": 16, "D": 64},
    sweep=[{"B": b, "H": h, "S": sq, "D": d} for b, h, sq, d in [
        (1, 1, 128, 64), (1, 8, 512, 64), (2, 12, 1024, 64), (1, 32, 2048, 128), (8, 8, 1024, 128),
        (2, 32, 4096, 128), (16, 16, 512, 64), (1, 8, 8192, 128), (4, 32, 2048, 128)]],
    cpu_sweep=[{"B": b, "H": h, "S": sq, "D": d} for b, h, sq, d in [
        (1, 1, 8, 16), (1, 2, 16, 32), (2, 2, 32, 64), (1, 4, 64, 64), (2, 1, 48, 128), (1, 3, 24, 32),
        (1, 2, 128, 16), (3, 2, 16, 64)]],
    edge_shapes=[{"B": b, "H": h, "S": sq, "D": d} for b, h, sq, d in [
        (1, 3, 1023, 128), (1, 1, 4097, 64), (2, 5, 1537, 64), (1, 1, 1, 64), (1, 7, 1, 128)]],
    cpu_edge_shapes=[{"B": b, "H": h, "S": sq, "D": d} for b, h, sq, d in [
        (1, 1, 1023, 16), (1, 1, 4097, 8), (1, 2, 1537, 8), (1, 1, 1, 16), (1, 3, 1, 64)]],
    timing_shape={"B": 4, "H": 32, "S": 2048, "D": 128},
    adversarial=[Adversarial("large values", {"B": 1, "H": 2, "S": 64, "D": 64},
                             lambda s, d, g, dev: rope_inputs(s, d, g, dev, x_scale=1e3), "x of magnitude 1e3")],
    bytes_moved=lambda s, e: (2.0 * s["B"] * s["H"] * s["S"] * s["D"] + s["S"] * s["D"]) * e,
    flops=lambda s: 3.0 * s["B"] * s["H"] * s["S"] * s["D"],
    recognise=Recognition(module=recognise_module, function=FUNCTIONS,
                          replaces_module=lambda module: is_rotary_name(type(module).__name__)),
    route=Routing(module_variants=module_variants, kept_attributes=(ROTARY_TABLES,)),
)
