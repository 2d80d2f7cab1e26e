"""softmax over the last dimension: inputs, shapes and overflow cases; aten::softmax in a trace; torch.softmax,
Tensor.softmax and F.softmax over the last dim routed."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import Adversarial, KernelType, Reading, Recognition, Routing, randn, rows


def rows_inputs(s, dtype, gen, device):
    return {"x": randn((s["M"], s["N"]), dtype, gen, device)}


def _large_identical(s, dtype, gen, device):
    # exp(10000) overflows every float type: only a kernel that subtracts the row max survives.
    return {"x": torch.full((s["M"], s["N"]), 1e4, device=device, dtype=dtype)}


def _large_mixed(s, dtype, gen, device):
    signs = torch.randint(0, 2, (s["M"], s["N"]), generator=gen, device=device) * 2 - 1
    x = signs * 1e4 + torch.randn((s["M"], s["N"]), generator=gen, device=device)
    return {"x": x.to(dtype)}


def _large_negative(s, dtype, gen, device):
    # Every entry far below zero (a fully masked row filled with -1e4, log-probabilities): a kernel must shift by
    # the row's own max, whatever its sign; one that never shifts a row upwards sees every exp underflow, 0 / 0.
    x = torch.randn((s["M"], s["N"]), generator=gen, device=device) - 1e4
    x[: s["M"] // 2] = -1e4
    return {"x": x.to(dtype)}


def _masked(s, dtype, gen, device):
    # Attention masks put -inf into rows; each row keeps at least one finite entry.
    x = torch.randn((s["M"], s["N"]), generator=gen, device=device)
    masked = torch.rand((s["M"], s["N"]), generator=gen, device=device) < 0.5
    masked[:, 0] = False
    return {"x": x.masked_fill(masked, float("-inf")).to(dtype)}


def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    return rows(shapes[0]) if shapes[0] else None


def read_softmax(input, dim=None, dtype=None, _stacklevel=3):
    # One signature for torch.softmax(input, dim, dtype), Tensor.softmax and F.softmax (which passes keywords).
    if dtype is not None or input.dim() == 0 or dim not in (-1, input.dim() - 1):
        return "softmax over a dimension other than the last, or with a dtype argument"
    return Reading(rows(input.shape), (input,), _launch_softmax)


def _launch_softmax(fn, input, dim=None, dtype=None, _stacklevel=3):
    return fn(input.reshape(-1, input.shape[-1]).contiguous()).reshape(input.shape)


KERNEL_TYPE = KernelType(
    name="softmax",
    profiled_ops=frozenset({"aten::softmax", "aten::_softmax"}),
    description="softmax over the last dimension of an (M, N) tensor",
    reference=reference.softmax,
    make_inputs=rows_inputs,
    smoke_shape={"M": 32, "N": 128},
    sweep=[{"M": m, "N": n} for m, n in [
        (1, 512), (128, 1024), (1024, 256), (4096, 2048), (2048, 4096), (1024, 8192), (256, 32768),
        (8192, 1024), (8192, 8192)]],
    cpu_sweep=[{"M": m, "N": n} for m, n in [
        (1, 64), (4, 128), (16, 256), (8, 512), (32, 32), (64, 64), (3, 1024), (2, 2048)]],
    edge_shapes=[{"M": m, "N": n} for m, n in [(1023, 1023), (17, 4097), (1537, 1537), (1, 1), (4096, 1)]],
    cpu_edge_shapes=[{"M": m, "N": n} for m, n in [(3, 1023), (2, 4097), (5, 1537), (1, 1), (7, 1)]],
    timing_shape={"M": 8192, "N": 8192},
    adversarial=[
        Adversarial("large identical values", {"M": 8, "N": 1024}, _large_identical,
                    "every entry 1e4: exp overflows without max subtraction"),
        Adversarial("large mixed-sign values", {"M": 8, "N": 1024}, _large_mixed,
                    "entries of +-1e4"),
        Adversarial("masked rows", {"M": 8, "N": 1024}, _masked, "half of each row is -inf"),
        Adversarial("large negative values", {"M": 8, "N": 1024}, _large_negative,
                    "every entry near -1e4 (half the rows all equal): the shift is the row max, never 0"),
    ],
    bytes_moved=lambda s, e: 2.0 * s["M"] * s["N"] * e,
    flops=lambda s: 5.0 * s["M"] * s["N"],
    recognise=Recognition(op_shape=op_shape),
    route=Routing(functions={torch.softmax: read_softmax, torch.Tensor.softmax: read_softmax,
                             F.softmax: read_softmax}),
)
