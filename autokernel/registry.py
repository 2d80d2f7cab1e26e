"""The registry of kernel types: one entry per type, read by bench, profile, extract and verify.

An entry says everything the tool needs to know about a kind of kernel: its PyTorch reference
(in reference.py, the oracle), how to make inputs for a shape, which shapes to check and time,
which adversarial inputs to try, how many bytes and FLOPs one call must move and do, whether
those FLOPs run on tensor cores, and which aten ops the profiler counts as a call of it.
Adding a kernel type means one entry here, one function in reference.py and one starter in
kernels/, and nothing else.

A shape is a dict of named sizes, for example {"M": 4096, "N": 4096, "K": 4096}; some types also
carry flags in it (attention's "causal", the MLPs' "act", reduce's "op"). On the command
line it is written "M=4096,N=4096,K=4096".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from autokernel import references as reference
from autokernel import registry_folded as folded
from autokernel.dtypes import pytorch_fp32_matmul_uses_tf32  # noqa: F401 (the registry's API too)

Shape = dict[str, int | float | str]
Inputs = dict[str, object]
InputMaker = Callable[[Shape, torch.dtype, torch.Generator, str], Inputs]


@dataclass(frozen=True)
class Adversarial:
    """Inputs chosen to break a kernel that is only right on friendly data."""
    name: str
    shape: Shape
    make_inputs: InputMaker
    why: str


@dataclass(frozen=True)
class KernelType:
    name: str
    reference: Callable
    make_inputs: InputMaker
    smoke_shape: Shape
    sweep: list[Shape]                # stage 2 on a GPU (8 to 10 shapes)
    cpu_sweep: list[Shape]            # stage 2 under the Triton interpreter
    edge_shapes: list[Shape]          # stage 5 on a GPU: non-powers of two and size 1
    cpu_edge_shapes: list[Shape]      # stage 5 under the interpreter
    timing_shape: Shape               # the default shape bench.py times on a GPU
    adversarial: list[Adversarial]    # stage 3
    bytes_moved: Callable[[Shape, int], float]   # fewest bytes one call must move (shape, element size)
    flops: Callable[[Shape], float]
    description: str
    tolerance_scale: float = 1.0     # multiplies the per-dtype tolerances, for types that need slack
    matrix: bool = False             # its FLOPs are matrix products (tensor cores), not float32-lane arithmetic
    # The aten ops the profiler counts as a call of this type when no module of a kernel type of its
    # own encloses them (autokernel/classify.py); an op belongs to one type at most.
    profiled_ops: frozenset[str] = frozenset()
    # Extra absolute error each output element may carry beyond the dtype's tolerance, for a type
    # whose PyTorch result itself carries more under a global setting (matmul under TF32):
    # error_allowance(inputs, oracle, dtype) -> a tensor shaped like the output, or None for none.
    # The judge calls it before the kernel runs, so the setting it reads is the caller's.
    error_allowance: Callable[[Inputs, torch.Tensor, torch.dtype], torch.Tensor | None] | None = None

    def inputs(self, shape: Shape, dtype: torch.dtype, seed: int, device: str) -> Inputs:
        """Fresh random inputs for one call, reproducible from the seed."""
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        return self.make_inputs(shape, dtype, gen, device)


def _randn(shape, dtype, gen, device, scale=1.0):
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def _rand_uniform(shape, gen, device, low, high):
    return torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (high - low) + low


def parse_shape(text: str) -> Shape:
    """"M=4096,N=11008,act=silu" -> {"M": 4096, "N": 11008, "act": "silu"}."""
    shape: Shape = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ValueError(f"bad shape {text!r}: expected NAME=VALUE pairs separated by commas, like M=4096,N=4096")
        key, value = (s.strip() for s in part.split("=", 1))
        shape[key] = _parse_value(value)
    return shape


def _parse_value(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_shape(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def dtype_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# --------------------------------------------------------------------------- matmul
def _matmul_inputs(s, dtype, gen, device):
    return {"a": _randn((s["M"], s["K"]), dtype, gen, device), "b": _randn((s["K"], s["N"]), dtype, gen, device)}


def _matmul_high_dynamic_range(s, dtype, gen, device):
    # Rows of a and columns of b span 10^-2..10^1, so a sloppy accumulator or a low-precision
    # intermediate loses the small rows while the output stays inside float16's range.
    row_scale = 10 ** _rand_uniform((s["M"], 1), gen, device, -2, 1)
    col_scale = 10 ** _rand_uniform((1, s["N"]), gen, device, -2, 1)
    a = (torch.randn((s["M"], s["K"]), generator=gen, device=device) * row_scale).to(dtype)
    b = (torch.randn((s["K"], s["N"]), generator=gen, device=device) * col_scale).to(dtype)
    return {"a": a, "b": b}


# TF32 keeps 10 of float32's 23 mantissa bits: an operand changes by a factor (1 + d) with
# -2^-10 < d <= 0 when the tensor cores drop the low bits, |d| <= 2^-11 when it is rounded.
TF32_UNIT = 2.0 ** -10
# The probability, per output element, that TF32's error exceeds the allowance (so a correct
# kernel fails): small enough for every judge run there will ever be.
TF32_FALSE_FAILURE = 1e-15


def tf32_matmul_allowance(inputs: Inputs, oracle: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """The error PyTorch's own float32 a @ b carries under TF32, per output element; None without TF32.

    Term k of C_ij = sum_k a_ik b_kj becomes a_ik b_kj (1 + d_a)(1 + d_b). Model the cuts d as
    independent and uniform over their range (width U = 2^-10, as rounding errors of random data
    are). Then:
    - their means add up to at most U |C_ij| (truncation's bias; zero when rounded);
    - around the means, a_ik b_kj (d_a + d_b) are independent symmetric uniforms, which are
      strictly sub-Gaussian: the sum exceeds z * sigma with probability at most 2 exp(-z^2 / 2),
      where sigma^2 = (U^2 / 6) sum_k a_ik^2 b_kj^2 and z = sqrt(2 ln(2 / p));
    - the d_a d_b terms add at most U^2 sum_k |a_ik b_kj| <= U^2 sqrt(K) sqrt(sum_k a_ik^2 b_kj^2).
    So the allowance is U |C_ij| + (z U / sqrt(6) + U^2 sqrt(K)) sqrt(sum_k a_ik^2 b_kj^2): it grows
    as sqrt(K) times the operands' magnitudes, about 0.4% of the output's RMS for Gaussian inputs,
    and it stays near the typical error of bfloat16 operands (eight times coarser), so most of a
    bfloat16 product still fails. Float32 accumulation error is the dtype tolerance's part, as
    without TF32.
    """
    if dtype != torch.float32 or not pytorch_fp32_matmul_uses_tf32():
        return None
    a, b = inputs["a"].double(), inputs["b"].double()
    spread = (a.square() @ b.square()).sqrt()
    z = math.sqrt(2 * math.log(2 / TF32_FALSE_FAILURE))
    unit = TF32_UNIT
    return unit * oracle.double().abs() + (z * unit / math.sqrt(6) + unit ** 2 * math.sqrt(a.shape[1])) * spread


MATMUL = KernelType(
    name="matmul",
    profiled_ops=frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}),
    matrix=True,
    description="C = A @ B, A (M, K), B (K, N)",
    reference=reference.matmul,
    make_inputs=_matmul_inputs,
    smoke_shape={"M": 64, "N": 64, "K": 64},
    # Big squares, the small-M model shapes (512 tokens), split-K (K much larger than M and N),
    # a tall-skinny output and an irregular one with unaligned rows.
    sweep=[{"M": m, "N": n, "K": k} for m, n, k in [
        (256, 256, 256), (512, 1024, 768), (512, 2048, 5632), (128, 4096, 4096), (4096, 4096, 128),
        (4096, 11008, 4096), (2053, 5921, 2949), (256, 256, 131072), (32768, 32, 4096), (4096, 4096, 4096)]],
    cpu_sweep=[{"M": m, "N": n, "K": k} for m, n, k in [
        (16, 16, 16), (32, 64, 32), (64, 32, 128), (128, 128, 64), (48, 80, 96), (96, 64, 160),
        (256, 16, 64), (64, 128, 256), (16, 32, 2048)]],
    edge_shapes=[{"M": m, "N": n, "K": k} for m, n, k in [
        (1023, 1537, 4097), (4097, 1023, 1537), (1, 4096, 4096), (7, 1023, 16385), (4096, 1, 1023),
        (1537, 1537, 1)]],
    cpu_edge_shapes=[{"M": m, "N": n, "K": k} for m, n, k in [
        (1023, 8, 16), (9, 1537, 16), (5, 7, 4097), (1, 33, 64), (33, 1, 17), (17, 19, 1)]],
    timing_shape={"M": 4096, "N": 4096, "K": 4096},
    adversarial=[Adversarial("high dynamic range", {"M": 128, "N": 96, "K": 256}, _matmul_high_dynamic_range,
                             "row and column scales from 0.01 to 10")],
    bytes_moved=lambda s, e: (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * e,
    flops=lambda s: 2.0 * s["M"] * s["N"] * s["K"],
    error_allowance=tf32_matmul_allowance,
)


# --------------------------------------------------------------------------- softmax
def _rows_inputs(s, dtype, gen, device):
    return {"x": _randn((s["M"], s["N"]), dtype, gen, device)}


def _softmax_large_identical(s, dtype, gen, device):
    # exp(10000) overflows every float type: only a kernel that subtracts the row max survives.
    return {"x": torch.full((s["M"], s["N"]), 1e4, device=device, dtype=dtype)}


def _softmax_large_mixed(s, dtype, gen, device):
    signs = torch.randint(0, 2, (s["M"], s["N"]), generator=gen, device=device) * 2 - 1
    x = signs * 1e4 + torch.randn((s["M"], s["N"]), generator=gen, device=device)
    return {"x": x.to(dtype)}


def _softmax_masked(s, dtype, gen, device):
    # Attention masks put -inf into rows; each row keeps at least one finite entry.
    x = torch.randn((s["M"], s["N"]), generator=gen, device=device)
    masked = torch.rand((s["M"], s["N"]), generator=gen, device=device) < 0.5
    masked[:, 0] = False
    return {"x": x.masked_fill(masked, float("-inf")).to(dtype)}


SOFTMAX = KernelType(
    name="softmax",
    profiled_ops=frozenset({"aten::softmax", "aten::_softmax"}),
    description="softmax over the last dimension of an (M, N) tensor",
    reference=reference.softmax,
    make_inputs=_rows_inputs,
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
        Adversarial("large identical values", {"M": 8, "N": 1024}, _softmax_large_identical,
                    "every entry 1e4: exp overflows without max subtraction"),
        Adversarial("large mixed-sign values", {"M": 8, "N": 1024}, _softmax_large_mixed,
                    "entries of +-1e4"),
        Adversarial("masked rows", {"M": 8, "N": 1024}, _softmax_masked, "half of each row is -inf"),
    ],
    bytes_moved=lambda s, e: 2.0 * s["M"] * s["N"] * e,
    flops=lambda s: 5.0 * s["M"] * s["N"],
)


# --------------------------------------------------------------------------- layernorm / rmsnorm
def _norm_x_shape(s) -> tuple[int, ...]:
    """A norm's input: (M, N) normalized over the last dim, or, with "I", (M, N, I) over dim 1 (the
    channels C of x (B, C, H, W): M = B, N = C, I = H * W). Without "I" no dim is passed, so kernel
    files written before the dim-1 form keep working at the shapes they were verified at."""
    return (s["M"], s["N"], int(s["I"])) if "I" in s else (s["M"], s["N"])


def _layernorm_inputs(s, dtype, gen, device, x_scale=1.0, x_offset=0.0):
    x = (torch.randn(_norm_x_shape(s), generator=gen, device=device) * x_scale + x_offset).to(dtype)
    weight = (1 + 0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    bias = (0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": weight, "bias": bias, "eps": 1e-5, **({"dim": 1} if "I" in s else {})}


def _layernorm_near_constant(s, dtype, gen, device):
    # Variance ~1e-8 around a mean of 100: E[x^2] - E[x]^2 cancels catastrophically, so a
    # one-pass variance gives garbage while the two-pass or Welford form stays right.
    return _layernorm_inputs(s, dtype, gen, device, x_scale=1e-4, x_offset=100.0)


def _layernorm_large(s, dtype, gen, device):
    # Squares of 1e3 overflow float16: statistics must be accumulated in float32.
    return _layernorm_inputs(s, dtype, gen, device, x_scale=1e3)


def _rmsnorm_inputs(s, dtype, gen, device, x_scale=1.0):
    x = _randn(_norm_x_shape(s), dtype, gen, device, scale=x_scale)
    weight = (1 + 0.1 * torch.randn(s["N"], generator=gen, device=device)).to(dtype)
    return {"x": x, "weight": weight, "eps": 1e-6, **({"dim": 1} if "I" in s else {})}


def _norm_positions(s) -> int:
    """Elements normalized as one group are N; there are M * I groups (I = 1 when absent)."""
    return s["M"] * int(s.get("I", 1))


# The last-dim form {M, N}, then the dim-1 form {M, N, I} (KernelBench's (16, 64, 256 * 256) first).
NORM_SWEEP = [{"M": m, "N": n} for m, n in [
    (1, 768), (128, 1024), (4096, 2048), (2048, 4096), (512, 16384), (8192, 4096), (8192, 8192)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(16, 64, 65536), (8, 256, 4096), (64, 3, 1024)]]
NORM_CPU_SWEEP = [{"M": m, "N": n} for m, n in [
    (1, 64), (4, 128), (16, 256), (8, 512), (32, 32), (64, 64), (3, 1024)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(2, 16, 64), (3, 7, 33)]] + [{"M": 2, "N": 2048}]
NORM_EDGE = [{"M": m, "N": n} for m, n in [(1023, 1023), (17, 4097), (1537, 1537), (1, 1), (4096, 1)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(3, 1023, 17), (1, 1, 4097)]]
NORM_CPU_EDGE = [{"M": m, "N": n} for m, n in [(3, 1023), (2, 4097), (5, 1537), (1, 1), (7, 1)]] + [
    {"M": m, "N": n, "I": i} for m, n, i in [(2, 1023, 5), (1, 1, 37), (5, 9, 1)]]

LAYERNORM = KernelType(
    name="layernorm",
    profiled_ops=frozenset({"aten::layer_norm", "aten::native_layer_norm"}),
    description="LayerNorm with weight and bias over the last dimension of an (M, N) tensor, or, with I, over "
                "dim 1 of an (M, N, I) tensor (the channels C of x (B, C, H, W): M = B, N = C, I = H * W)",
    reference=reference.layernorm,
    make_inputs=_layernorm_inputs,
    smoke_shape={"M": 32, "N": 128},
    sweep=NORM_SWEEP,
    cpu_sweep=NORM_CPU_SWEEP,
    edge_shapes=NORM_EDGE,
    cpu_edge_shapes=NORM_CPU_EDGE,
    timing_shape={"M": 8192, "N": 4096},
    adversarial=[
        Adversarial("near-zero variance", {"M": 16, "N": 1024}, _layernorm_near_constant,
                    "mean 100, standard deviation 1e-4"),
        Adversarial("large values", {"M": 16, "N": 1024}, _layernorm_large, "standard deviation 1e3"),
        Adversarial("near-zero variance over dim 1", {"M": 4, "N": 256, "I": 8}, _layernorm_near_constant,
                    "mean 100, standard deviation 1e-4, each position over its 256 channels"),
    ],
    bytes_moved=lambda s, e: (2.0 * _norm_positions(s) * s["N"] + 2.0 * s["N"]) * e,
    flops=lambda s: 8.0 * _norm_positions(s) * s["N"],
)

RMSNORM = KernelType(
    name="rmsnorm",
    profiled_ops=frozenset({"aten::rms_norm", "aten::_fused_rms_norm"}),
    description="RMSNorm with a weight over the last dimension of an (M, N) tensor, or, with I, over dim 1 "
                "of an (M, N, I) tensor (the channels C of x (B, C, H, W): M = B, N = C, I = H * W)",
    reference=reference.rmsnorm,
    make_inputs=_rmsnorm_inputs,
    smoke_shape={"M": 32, "N": 128},
    sweep=NORM_SWEEP,
    cpu_sweep=NORM_CPU_SWEEP,
    edge_shapes=NORM_EDGE,
    cpu_edge_shapes=NORM_CPU_EDGE,
    timing_shape={"M": 8192, "N": 8192},
    adversarial=[
        Adversarial("near-zero values", {"M": 16, "N": 1024},
                    lambda s, d, g, dev: _rmsnorm_inputs(s, d, g, dev, x_scale=1e-4), "standard deviation 1e-4"),
        Adversarial("large values", {"M": 16, "N": 1024},
                    lambda s, d, g, dev: _rmsnorm_inputs(s, d, g, dev, x_scale=1e3),
                    "standard deviation 1e3: squares overflow float16"),
        Adversarial("large values over dim 1", {"M": 4, "N": 256, "I": 8},
                    lambda s, d, g, dev: _rmsnorm_inputs(s, d, g, dev, x_scale=1e3),
                    "standard deviation 1e3 over the channels of each position: squares overflow float16"),
    ],
    bytes_moved=lambda s, e: (2.0 * _norm_positions(s) * s["N"] + s["N"]) * e,
    flops=lambda s: 4.0 * _norm_positions(s) * s["N"],
)


RMSNORM_LINEAR = KernelType(
    name="rmsnorm_linear",
    matrix=True,
    description="RMSNorm folded into the linear layer after it: rmsnorm(x, norm_weight) @ W^T, x (M, K), W (N, K)",
    reference=reference.rmsnorm_linear,
    make_inputs=folded.rmsnorm_linear_inputs,
    smoke_shape={"M": 32, "N": 64, "K": 64},
    sweep=folded.RMSNORM_LINEAR_SHAPES["sweep"],
    cpu_sweep=folded.RMSNORM_LINEAR_SHAPES["cpu_sweep"],
    edge_shapes=folded.RMSNORM_LINEAR_SHAPES["edge"],
    cpu_edge_shapes=folded.RMSNORM_LINEAR_SHAPES["cpu_edge"],
    timing_shape={"M": 4096, "N": 2048, "K": 2048},
    adversarial=[
        Adversarial("huge rows", {"M": 16, "N": 96, "K": 512}, folded.huge_rows,
                    "entries up to 6e4, norm weight near 1.5: squares and x * norm weight overflow float16"),
        Adversarial("zero, constant and tiny rows", {"M": 16, "N": 96, "K": 512}, folded.degenerate_rows,
                    "a zero row, constant rows, and row scales from 1e-3 to 1e3"),
    ],
    bytes_moved=folded.rmsnorm_linear_bytes,
    flops=folded.rmsnorm_linear_flops,
)


# --------------------------------------------------------------------------- flash attention
def _kv_heads(s) -> int:
    """Key/value heads: "KV" for grouped- or multi-query attention (dividing H), else H."""
    return int(s.get("KV", s["H"]))


def _attention_inputs(s, dtype, gen, device, qk_scale=1.0):
    queries = (s["B"], s["H"], s["S"], s["D"])
    keys = (s["B"], _kv_heads(s), s["S"], s["D"])
    return {
        "q": _randn(queries, dtype, gen, device, scale=qk_scale),
        "k": _randn(keys, dtype, gen, device, scale=qk_scale),
        "v": _randn(keys, dtype, gen, device),
        "causal": bool(s.get("causal", 0)),
        "sm_scale": float(s["sm_scale"]) if "sm_scale" in s else None,
    }


def _attention_flops(s):
    full = 4.0 * s["B"] * s["H"] * s["S"] * s["S"] * s["D"]
    return full / 2 if s.get("causal", 0) else full


def _attention_shapes(rows) -> list[Shape]:
    """(B, H, KV, S, D, causal) rows as shapes; KV is left out where it equals H."""
    return [{"B": b, "H": h, **({"KV": kv} if kv != h else {}), "S": sq, "D": d, "causal": c}
            for b, h, kv, sq, d, c in rows]


FLASH_ATTENTION = KernelType(
    name="flash_attention",
    profiled_ops=frozenset({"aten::_flash_attention_forward", "aten::_efficient_attention_forward"}),
    matrix=True,
    description="softmax(Q K^T * sm_scale) V over (B, H, S, D) queries and (B, KV, S, D) keys and values "
                "(KV dividing H: grouped- or multi-query), causal or not",
    reference=reference.flash_attention,
    make_inputs=_attention_inputs,
    smoke_shape={"B": 1, "H": 2, "S": 64, "D": 64, "causal": 0},
    sweep=_attention_shapes([
        (1, 8, 8, 128, 64, 0), (2, 8, 8, 512, 64, 1), (1, 12, 12, 512, 64, 0), (2, 16, 16, 1024, 128, 1),
        (4, 16, 4, 1024, 128, 1), (2, 16, 1, 1024, 128, 0), (1, 8, 8, 1024, 256, 1), (8, 16, 16, 512, 128, 0),
        (4, 32, 32, 2048, 128, 1)]) + [{"B": 2, "H": 8, "S": 1024, "D": 64, "causal": 1, "sm_scale": 0.25}],
    cpu_sweep=_attention_shapes([
        (1, 1, 1, 16, 16, 0), (1, 2, 2, 32, 32, 1), (2, 2, 2, 64, 32, 0), (1, 2, 2, 64, 64, 1),
        (1, 1, 1, 128, 16, 1), (1, 4, 2, 48, 32, 1), (2, 3, 1, 40, 16, 0), (1, 2, 1, 24, 256, 1),
        (1, 1, 1, 80, 64, 1)]) + [{"B": 1, "H": 2, "S": 64, "D": 32, "causal": 0, "sm_scale": 0.25}],
    edge_shapes=_attention_shapes([
        (1, 4, 4, 1023, 64, 1), (1, 2, 2, 4097, 64, 0), (2, 3, 3, 1537, 128, 1), (1, 6, 2, 1023, 96, 1),
        (1, 4, 1, 1537, 192, 0), (1, 1, 1, 1, 64, 0), (3, 1, 1, 1, 128, 1)]),
    cpu_edge_shapes=_attention_shapes([
        (1, 1, 1, 1023, 16, 1), (1, 1, 1, 1537, 16, 0), (1, 1, 1, 4097, 8, 1), (1, 3, 3, 33, 32, 1),
        (1, 4, 2, 33, 24, 1), (1, 1, 1, 1, 16, 0), (2, 2, 1, 1, 32, 1)]),
    timing_shape={"B": 4, "H": 32, "S": 2048, "D": 128, "causal": 1},
    adversarial=[Adversarial("large scores", {"B": 1, "H": 2, "S": 256, "D": 64, "causal": 1},
                             lambda s, d, g, dev: _attention_inputs(s, d, g, dev, qk_scale=8.0),
                             "q and k scaled by 8: row maxima near 200, exp overflows without max subtraction")],
    # q read and the output written (H heads), k and v read once (KV heads).
    bytes_moved=lambda s, e: (2.0 * s["H"] + 2.0 * _kv_heads(s)) * s["B"] * s["S"] * s["D"] * e,
    flops=_attention_flops,
)


# --------------------------------------------------------------------------- fused MLP
def _mlp_inputs(s, dtype, gen, device, x_scale=1.0):
    d, f = s["D"], s["F"]
    return {
        "x": _randn((s["M"], d), dtype, gen, device, scale=x_scale),
        "w_gate": _randn((f, d), dtype, gen, device, scale=1 / math.sqrt(d)),
        "w_up": _randn((f, d), dtype, gen, device, scale=1 / math.sqrt(d)),
        "w_down": _randn((d, f), dtype, gen, device, scale=1 / math.sqrt(f)),
        "activation": str(s.get("act", "silu")),
    }


FUSED_MLP = KernelType(
    name="fused_mlp",
    matrix=True,
    description="gated MLP: (act(x W_gate^T) * (x W_up^T)) W_down^T, act in silu / gelu / relu2",
    reference=reference.fused_mlp,
    make_inputs=_mlp_inputs,
    smoke_shape={"M": 32, "D": 64, "F": 128, "act": "silu"},
    sweep=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (128, 512, 1408, "silu"), (512, 1024, 2816, "gelu"), (1024, 768, 3072, "relu2"),
        (2048, 2048, 5632, "silu"), (256, 4096, 11008, "silu"), (4096, 1024, 4096, "gelu"),
        (1024, 4096, 14336, "silu"), (4096, 4096, 11008, "silu")]],
    cpu_sweep=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (8, 32, 64, "silu"), (16, 64, 128, "gelu"), (32, 32, 96, "relu2"), (24, 48, 80, "silu"),
        (64, 64, 64, "gelu"), (16, 128, 256, "silu"), (40, 64, 160, "relu2"), (32, 96, 192, "silu")]],
    edge_shapes=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (1023, 1024, 4097, "silu"), (1537, 1537, 1023, "gelu"), (1, 4096, 11008, "silu"), (5, 1, 1, "relu2")]],
    cpu_edge_shapes=[{"M": m, "D": d, "F": f, "act": a} for m, d, f, a in [
        (1023, 16, 16, "silu"), (3, 16, 1537, "gelu"), (3, 1023, 16, "relu2"), (2, 8, 4097, "relu2"),
        (1, 32, 64, "silu"),
        (5, 1, 1, "gelu")]],
    timing_shape={"M": 4096, "D": 4096, "F": 11008, "act": "silu"},
    adversarial=[Adversarial("large activations", {"M": 64, "D": 256, "F": 512, "act": "silu"},
                             lambda s, d, g, dev: _mlp_inputs(s, d, g, dev, x_scale=30.0),
                             "x scaled by 30: gate pre-activations far into silu's tails")],
    bytes_moved=lambda s, e: (2.0 * s["M"] * s["D"] + 3.0 * s["D"] * s["F"]) * e,
    flops=lambda s: 6.0 * s["M"] * s["D"] * s["F"],
)


# RMSNorm folded into the gated MLP it feeds (helpers in autokernel/registry_folded.py).
_NORM_MLP_CASE = {"M": 16, "D": 256, "F": 128, "act": "silu"}
RMSNORM_MLP = KernelType(
    name="rmsnorm_mlp",
    matrix=True,
    description="RMSNorm over D, then the gated MLP: fused_mlp(rmsnorm(x, norm_weight, eps), W_gate, W_up, W_down)",
    reference=reference.rmsnorm_mlp,
    make_inputs=folded.rmsnorm_mlp_inputs,
    smoke_shape={"M": 32, "D": 64, "F": 128, "act": "silu"},
    sweep=folded.RMSNORM_MLP_SHAPES["sweep"],
    cpu_sweep=folded.RMSNORM_MLP_SHAPES["cpu_sweep"],
    edge_shapes=folded.RMSNORM_MLP_SHAPES["edge"],
    cpu_edge_shapes=folded.RMSNORM_MLP_SHAPES["cpu_edge"],
    timing_shape={"M": 4096, "D": 4096, "F": 11008, "act": "silu"},
    adversarial=[
        Adversarial("huge rows", _NORM_MLP_CASE, folded.rmsnorm_mlp_huge_rows,
                    "entries up to 6e4, norm weight near 2: x^2 and x * norm weight overflow float16"),
        Adversarial("zero and tiny rows", _NORM_MLP_CASE, folded.rmsnorm_mlp_zero_and_tiny_rows,
                    "a row of zeros, and rows whose mean square (1e-8) is below eps"),
        Adversarial("large norm weight", {**_NORM_MLP_CASE, "M": 64, "F": 512}, folded.rmsnorm_mlp_large_norm_weight,
                    "norm weight near 30: gate pre-activations in silu's tails"),
    ],
    bytes_moved=folded.rmsnorm_mlp_bytes,
    flops=folded.rmsnorm_mlp_flops,
)


# --------------------------------------------------------------------------- cross entropy
def _ce_inputs(s, dtype, gen, device, logit_scale=1.0):
    logits = _randn((s["M"], s["V"]), dtype, gen, device, scale=logit_scale)
    targets = torch.randint(0, s["V"], (s["M"],), generator=gen, device=device)
    return {"logits": logits, "targets": targets}


def _ce_extreme(s, dtype, gen, device):
    # Logits of +-1e4: the log-sum-exp must subtract the row max and accumulate in float32.
    inputs = _ce_inputs(s, dtype, gen, device)
    signs = torch.randint(0, 2, (s["M"], s["V"]), generator=gen, device=device) * 2 - 1
    inputs["logits"] = (signs * 1e4 + torch.randn((s["M"], s["V"]), generator=gen, device=device)).to(dtype)
    return inputs


CROSS_ENTROPY = KernelType(
    name="cross_entropy",
    profiled_ops=frozenset({"aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd",
                           "aten::nll_loss_forward", "aten::nll_loss2d"}),
    description="mean cross-entropy of (M, V) logits against M integer targets",
    reference=reference.cross_entropy,
    make_inputs=_ce_inputs,
    smoke_shape={"M": 16, "V": 256},
    sweep=[{"M": m, "V": v} for m, v in [
        (1, 1000), (128, 32000), (1024, 50257), (2048, 32768), (4096, 8192), (512, 128256),
        (8192, 4096), (4096, 32000), (8192, 32768)]],
    cpu_sweep=[{"M": m, "V": v} for m, v in [
        (1, 64), (4, 128), (16, 256), (8, 512), (32, 32), (64, 64), (3, 1024), (2, 2048)]],
    edge_shapes=[{"M": m, "V": v} for m, v in [(1023, 1023), (17, 4097), (1537, 1537), (1, 1), (4096, 1)]],
    cpu_edge_shapes=[{"M": m, "V": v} for m, v in [(3, 1023), (2, 4097), (5, 1537), (1, 1), (7, 1)]],
    timing_shape={"M": 8192, "V": 32768},
    adversarial=[Adversarial("extreme logits", {"M": 16, "V": 1024}, _ce_extreme, "logits of +-1e4")],
    bytes_moved=lambda s, e: s["M"] * s["V"] * e + s["M"] * 8.0,
    flops=lambda s: 4.0 * s["M"] * s["V"],
)


# --------------------------------------------------------------------------- rotary embedding
def _rope_inputs(s, dtype, gen, device, x_scale=1.0):
    b, h, seq, d = s["B"], s["H"], s["S"], s["D"]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d // 2, device=device, dtype=torch.float32) * 2 / d))
    angles = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return {"x": _randn((b, h, seq, d), dtype, gen, device, scale=x_scale),
            "cos": angles.cos().to(dtype), "sin": angles.sin().to(dtype)}


ROTARY_EMBEDDING = KernelType(
    name="rotary_embedding",
    description="rotary position embedding (rotate-half) of (B, H, S, D) with (S, D/2) cos and sin",
    reference=reference.rotary_embedding,
    make_inputs=_rope_inputs,
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
                             lambda s, d, g, dev: _rope_inputs(s, d, g, dev, x_scale=1e3), "x of magnitude 1e3")],
    bytes_moved=lambda s, e: (2.0 * s["B"] * s["H"] * s["S"] * s["D"] + s["S"] * s["D"]) * e,
    flops=lambda s: 3.0 * s["B"] * s["H"] * s["S"] * s["D"],
)


# --------------------------------------------------------------------------- reduce
REDUCE_OPS = ("sum", "mean", "max", "min")


def reduce_layout(s: Shape) -> tuple[int, int, int]:
    """(O, R, I) of a reduce shape: a tensor viewed as (outer, reduced, inner), reduced over R.

    Shapes written before any dimension could be reduced, {M, N, dim} (an (M, N) tensor reduced
    over dim -1 or 0), are still read: plans, job shapes and manifests of that time stay valid.
    """
    if "R" in s:
        return int(s.get("O", 1)), int(s["R"]), int(s.get("I", 1))
    return (int(s["M"]), int(s["N"]), 1) if int(s.get("dim", -1)) in (1, -1) else (1, int(s["M"]), int(s["N"]))


def reduce_shape(outer: int, reduced: int, inner: int, op: str) -> Shape:
    return {"O": outer, "R": reduced, "I": inner, "op": op}


def reduce_call(outer: int, reduced: int, inner: int) -> tuple[tuple[int, ...], int]:
    """The tensor shape and dim a reduce kernel is called with for a layout: (O, R) over dim -1 when I
    is 1, (R, I) over dim 0 when O is 1 (the 2-D forms reduce kernels took before any dim could be
    reduced, so their files keep working), else (O, R, I) over dim 1. The router calls kernels so too."""
    if inner == 1:
        return (outer, reduced), -1
    if outer == 1:
        return (reduced, inner), 0
    return (outer, reduced, inner), 1


def canonical_reduce_shape(s: Shape) -> Shape:
    """A reduce shape in today's keys {O, R, I, op}, whichever keys it was written with."""
    return reduce_shape(*reduce_layout(s), str(s.get("op", "sum")))


def _reduce_inputs(s, dtype, gen, device, x_scale=1.0, x_offset=0.0):
    sizes, dim = reduce_call(*reduce_layout(s))
    x = (torch.randn(sizes, generator=gen, device=device) * x_scale + x_offset).to(dtype)
    return {"x": x, "dim": dim, "op": str(s.get("op", "sum"))}


def _reduce_nonfinite(s, dtype, gen, device):
    # max / min as torch.amax / amin: a nan anywhere in a reduced line makes it nan, an inf of
    # the op's own sign wins, and a line of nothing but the other inf stays that inf.
    inputs = _reduce_inputs(s, dtype, gen, device)
    outer, reduced, inner = reduce_layout(s)
    x = inputs["x"].reshape(outer, reduced, inner)
    x[0, reduced // 2, 0] = float("nan")
    x[-1, :, -1] = float("-inf") if s.get("op") == "max" else float("inf")
    x[0, 1, inner - 1] = float("inf")
    x[0, 2, inner - 1] = float("-inf")
    x[outer - 1, 0, 0] = float("nan")
    x[outer - 1, 3, 0] = float("inf")
    return inputs


def _reduce_output_elems(s):
    outer, _, inner = reduce_layout(s)
    return outer * inner


def _reduce_shapes(rows) -> list[Shape]:
    return [reduce_shape(*row) for row in rows]


REDUCE = KernelType(
    name="reduce",
    # torch.max / torch.min(x, dim) (aten::max, aten::min) return indices too, which the reduce
    # kernels do not compute, so the router leaves them to PyTorch and they are not planned either.
    profiled_ops=frozenset({"aten::sum", "aten::mean", "aten::amax", "aten::amin"}),
    description="sum, mean, max or min of a tensor viewed as (O, R, I) over R (any one dimension, or a "
                "run of adjacent ones); max and min are amax / amin (values only)",
    reference=reference.reduce,
    make_inputs=_reduce_inputs,
    smoke_shape=reduce_shape(4, 128, 8, "sum"),
    # Reduced last (I = 1), first (O = 1) and in the middle (KernelBench's (16, 256, 256) over dim 1).
    sweep=_reduce_shapes([
        (1, 4096, 1, "sum"), (1024, 1024, 1, "max"), (4096, 4096, 1, "mean"), (1, 4096, 4096, "sum"),
        (1, 8192, 1024, "max"), (16, 256, 256, "sum"), (16, 256, 256, "max"), (128, 1024, 128, "mean"),
        (64, 4096, 64, "min"), (8192, 8192, 1, "sum")]),
    cpu_sweep=_reduce_shapes([
        (1, 64, 1, "sum"), (4, 128, 1, "max"), (1, 16, 256, "sum"), (4, 32, 16, "mean"), (3, 50, 7, "min"),
        (2, 64, 64, "max"), (8, 33, 5, "sum"), (64, 64, 1, "min"), (3, 1024, 1, "mean")]),
    edge_shapes=_reduce_shapes([
        (1023, 1023, 1, "sum"), (17, 4097, 1, "max"), (1, 1537, 1537, "mean"), (1, 4097, 3, "min"),
        (7, 1023, 33, "sum"), (3, 1, 4097, "max"), (1, 1, 1, "sum"), (4096, 1, 1, "min"), (1, 4096, 1, "mean")]),
    cpu_edge_shapes=_reduce_shapes([
        (3, 1023, 1, "sum"), (2, 4097, 1, "max"), (1, 1537, 3, "mean"), (1, 4097, 2, "min"), (3, 37, 5, "sum"),
        (5, 1, 9, "max"), (1, 1, 1, "sum"), (7, 1, 1, "min"), (1, 7, 1, "mean")]),
    timing_shape=reduce_shape(8192, 8192, 1, "sum"),
    adversarial=[
        Adversarial("all-negative values (max)", reduce_shape(16, 1024, 1, "max"),
                    lambda s, d, g, dev: _reduce_inputs(s, d, g, dev, x_offset=-50.0),
                    "every value below zero: a max that starts from 0 is wrong"),
        Adversarial("all-positive values (min)", reduce_shape(4, 256, 8, "min"),
                    lambda s, d, g, dev: _reduce_inputs(s, d, g, dev, x_offset=50.0),
                    "every value above zero: a min that starts from 0 is wrong"),
        Adversarial("nan and inf (max)", reduce_shape(4, 256, 8, "max"), _reduce_nonfinite,
                    "nan propagates, +inf wins, a line of -inf stays -inf"),
        Adversarial("nan and inf (min)", reduce_shape(4, 256, 8, "min"), _reduce_nonfinite,
                    "nan propagates, -inf wins, a line of +inf stays +inf"),
        Adversarial("large values (sum)", reduce_shape(16, 1024, 1, "sum"),
                    lambda s, d, g, dev: _reduce_inputs(s, d, g, dev, x_scale=1e2),
                    "sums of +-100: a float16 accumulator loses the result"),
        Adversarial("sums near float16's limit", reduce_shape(4, 1024, 8, "sum"),
                    lambda s, d, g, dev: _reduce_inputs(s, d, g, dev, x_offset=60.0),
                    "1024 values near 60 sum to about 61440: a float16 accumulator, whose spacing there "
                    "is 32, rounds away most of every addition"),
        Adversarial("means near float16's limit", reduce_shape(4, 1024, 8, "mean"),
                    lambda s, d, g, dev: _reduce_inputs(s, d, g, dev, x_offset=60.0),
                    "the mean of the same values: the sum must still be accumulated in float32"),
    ],
    bytes_moved=lambda s, e: (math.prod(reduce_layout(s)) + _reduce_output_elems(s)) * e,
    flops=lambda s: float(math.prod(reduce_layout(s))),
)


REGISTRY: dict[str, KernelType] = {t.name: t for t in [
    MATMUL, SOFTMAX, LAYERNORM, RMSNORM, RMSNORM_LINEAR, FLASH_ATTENTION, FUSED_MLP, RMSNORM_MLP, CROSS_ENTROPY,
    ROTARY_EMBEDDING, REDUCE]}


def get(name: str) -> KernelType:
    if name not in REGISTRY:
        raise KeyError(f"unknown kernel type {name!r}; known types: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def canonical_shape(kernel_type: str, shape: Shape) -> Shape:
    """The shape in the keys its type uses today: a reduce shape of the form {M, N, dim, op} (before any
    dimension could be reduced) becomes {O, R, I, op}; every other shape is returned as it is."""
    return canonical_reduce_shape(shape) if kernel_type == "reduce" else dict(shape)
