"""The records one kernel type definition is made of, and the helpers the definitions share.

A kernel type is one module of this package (autokernel/kernel_types/<name>.py) whose KERNEL_TYPE
holds everything the tool knows about it:
  - the registry entry: its PyTorch reference (in references.py, the oracle), how to make inputs
    for a shape, the shapes to check and time, the adversarial inputs, the bytes and FLOPs one call
    must move and do, the aten ops the profiler counts as a call of it (read by bench, extract and
    the registry, autokernel/kernel_types/registry.py);
  - `recognise`: how the profiler tells a call of it in a trace (autokernel/profile/classify.py walks the
    trace and asks every type);
  - `route`: how verify reads a call of it and launches a kernel in its place
    (autokernel/routing/routes.py and autokernel/routing/router.py ask every type);
  - `fold`: for a type that folds a norm into the modules that read its output, which norms and
    consumers, and how a consumer's call on the norm's raw input reads (autokernel/routing/fold_routing.py).

A shape is a dict of named sizes, for example {"M": 4096, "N": 4096, "K": 4096}; some types also
carry flags in it (attention's "causal", the MLPs' "act", reduce's "op").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import torch
from torch import nn

Shape = dict[str, int | float | str]
Inputs = dict[str, object]
InputMaker = Callable[[Shape, torch.dtype, torch.Generator, str], Inputs]


# --------------------------------------------------------------------------- routing records
@dataclass(frozen=True)
class Reading:
    """One call as a kernel takes it: its registry shape, the float inputs (one dtype), and how to launch."""
    shape: dict
    tensors: tuple
    launch: Callable        # function routes: launch(fn, *args, **kwargs); module routes: launch(fn, x)
    # Whether torch.compile may run the launch through the kernel's graph op, whose schema is the
    # reference's one-tensor result (autokernel/routing/kernel_ops.py); torch.max(x, dim)'s pair cannot.
    traceable: bool = True


@dataclass(frozen=True)
class ModuleVariant:
    """One way a module could run as a kernel: the type, whether its first call must be checked, and its reader."""
    kernel_type: str
    label: str
    read: Callable[[torch.Tensor], Reading | str]
    needs_check: bool = True     # inferred from the module's structure, so checked against its own forward once
    # Where one module has several readings (a norm read as layernorm or as rmsnorm), the variants
    # of all types are tried in rank order, ties in registry order; norms rank (0, ...), first.
    rank: tuple = (1,)


@dataclass(frozen=True)
class Routing:
    """How verify runs this type in place of PyTorch's op (autokernel/routing/routes.py reads every type's)."""
    # torch function -> a reader of its call's arguments, returning a Reading or why the call cannot run
    functions: dict[Callable, Callable] = field(default_factory=dict)
    # (module, the shapes kernels of this type were verified at) -> the ways the module could run as one
    module_variants: Callable[[nn.Module, list[dict]], list[ModuleVariant]] | None = None
    # attributes this type's launches keep on modules (a transposed weight), dropped when unplugged
    kept_attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FoldType:
    """A fused type that takes a norm's raw input: which norms and consumers, how a consumer's call reads,
    and how the profiler shapes a site of it (autokernel/routing/fold_routing.py, autokernel/profile/classify.py)."""
    kernel_type: str
    is_norm: Callable[[nn.Module], bool]
    is_consumer: Callable[[nn.Module], bool]
    read: Callable[[nn.Module, nn.Module, torch.Tensor], Reading | str]    # (norm, consumer, raw x)
    # (rows, the consumer module, the activation the trace shows it running) -> the site's shape
    site_shape: Callable[[int, nn.Module, str | None], Shape]
    preference: int          # lower first, where two fold types could fold the same norm
    policy: str              # how the profiler counts a fold, as the plan states it
    # (the consumers, their traced activations) -> whether the router would read the fold as traced
    plannable: Callable[[tuple, list], bool] = lambda consumers, traced: True


# --------------------------------------------------------------------------- recognition records
@dataclass
class ModuleMatch:
    """A module whose whole call is one kernel of a type, as the profiler found it."""
    kernel_type: str
    module: nn.Module
    shape: Callable[[tuple[int, ...], list], Shape | None]   # (a call's input shape, its root ops) -> shape
    activation: str | None = None                             # the activation the module ran (an MLP's)


@dataclass(frozen=True)
class FunctionRecognition:
    """A computation the model writes as its own Python functions (rotate_half): their calls are one kernel."""
    is_name: Callable[[str], bool]                  # a function name of this type
    touched: Callable[[list], tuple | None]         # the tensor shape the calls' root ops worked on
    joins: Callable[[object, tuple], bool]          # (a root op beside the calls, touched) -> part of it
    shape: Callable[[list], Shape | None]           # the shape of a call site from its root ops


@dataclass(frozen=True)
class Recognition:
    """How the profiler tells calls of this type in a trace (autokernel/profile/classify.py asks every type)."""
    # (op name, its torch profiler event, its recorded input shapes) -> the shape of an op this type
    # claims (its profiled_ops and claims_op); None leaves the op as "other"
    op_shape: Callable[[str, object, list[list[int]]], Shape | None] | None = None
    # (op name, the names of all root ops in the trace) -> an op beyond profiled_ops counted as this type
    claims_op: Callable[[str, set[str]], bool] | None = None
    # (module, the names of the root ops under it, those ops) -> a match when its whole call is one kernel
    module: Callable[[nn.Module, set[str], list], ModuleMatch | None] | None = None
    # a module that could be counted as one kernel of this type by its structure alone (no trace)
    replaces_module: Callable[[nn.Module], bool] | None = None
    function: FunctionRecognition | None = None


# --------------------------------------------------------------------------- the registry entry
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
    # own encloses them (autokernel/profile/classify.py); an op belongs to one type at most.
    profiled_ops: frozenset[str] = frozenset()
    # Extra absolute error each output element may carry beyond the dtype's tolerance, for a type
    # whose PyTorch result itself carries more under a global setting (matmul under TF32), or whose
    # honest result carries rounding at its inputs' size that a tolerance relative to the output
    # does not cover (cross_entropy's lse - x[target]):
    # error_allowance(inputs, oracle, dtype) -> a tensor shaped like the output, or None for none.
    # The judge calls it before the kernel runs, so the setting it reads is the caller's.
    error_allowance: Callable[[Inputs, torch.Tensor, torch.dtype], torch.Tensor | None] | None = None
    recognise: Recognition = Recognition()
    route: Routing = Routing()
    fold: FoldType | None = None
    # The dtypes the type can be judged in (None: every one of dtypes.DTYPES). A region
    # (autokernel/kernel_types/regions/) is judged in the model's own dtype only, since it is routed only there.
    dtypes: tuple[str, ...] | None = None
    # What the reference computes, shown to the LLM where inspect cannot read the reference's source
    # (a region's: the model's source lines it covers and its ATen ops).
    source: str | None = None
    # PyTorch's own op for the function, where users call one (attention: F.scaled_dot_product_attention), taking
    # the reference's arguments: timed, eager and compiled, as PyTorch's bar in the reference's place, which stays
    # the correctness oracle (its math formulation is slower than what a user's code runs).
    pytorch_op: Callable | None = None

    @property
    def pytorch(self) -> Callable:
        """What PyTorch's bar times: its own op where the type names one, else the reference."""
        return self.pytorch_op or self.reference

    def supports(self, dtype: torch.dtype) -> bool:
        """Whether the type is judged in this dtype."""
        return self.dtypes is None or str(dtype).removeprefix("torch.") in self.dtypes

    def inputs(self, shape: Shape, dtype: torch.dtype, seed: int, device: str) -> Inputs:
        """Fresh random inputs for one call, reproducible from the seed."""
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        return self.make_inputs(shape, dtype, gen, device)


# --------------------------------------------------------------------------- shared helpers
def randn(shape, dtype, gen, device, scale=1.0):
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)


def normal(shape, gen, device):
    """Standard normal float32 values (for inputs built in float32 and cast at the end)."""
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)


def rand_uniform(shape, gen, device, low, high):
    return torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (high - low) + low


def rows(shape, trailing: int = 1) -> dict:
    """(..., N) -> {"M": product of the leading sizes, "N": N}; N is the product of the last `trailing` sizes,
    as the profiler and the router both count rows."""
    return {"M": math.prod(shape[:-trailing]), "N": math.prod(shape[-trailing:])}


def bhsd(shape) -> dict | None:
    """A (B, H, S, D) or (H, S, D) tensor shape as {B, H, S, D}; None for any other rank."""
    if shape is None or len(shape) not in (3, 4):
        return None
    batch, heads, seq, head_dim = (1, *shape) if len(shape) == 3 else shape
    return {"B": batch, "H": heads, "S": seq, "D": head_dim}


@lru_cache(maxsize=None)
def _argument_index(op: str, n_args: int, argument: str) -> int | None:
    for schema in torch._C._jit_get_schemas_for_operator(op):
        names = [arg.name for arg in schema.arguments]
        if len(names) == n_args and argument in names:
            return names.index(argument)
    return None


def recorded_argument(event, argument: str):
    """The recorded value of a scalar argument of an aten op in a trace, or None when it was not recorded."""
    values = event.concrete_inputs or []
    index = _argument_index(event.name, len(values), argument)
    return values[index] if index is not None else None
