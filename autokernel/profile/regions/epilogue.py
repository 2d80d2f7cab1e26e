"""A GEMM region's epilogue read from its ATen ops: what a GEMM tile kernel must compute after its dot, as Triton.

A region with a GEMM (mm or addmm) at its head and pointwise ops after it, maybe a reduction over each
output row and then one over every row (sum, mean, amax, amin; logsumexp for the last), is a GEMM with an
epilogue. `read(definition)` returns that as an `Epilogue` (each op's value as a Triton expression,
the inputs each reads with their offsets and strides) or raises `Unsupported` saying why; a region
that is not of this shape keeps Inductor's starter alone (gemm_variant.py writes the kernels; epilogue_ops.py
holds the pointwise ops' expressions). Also read: max.dim's values (never its indices) and an inference
batch norm over the product's columns (its running statistics read per column).

Every value has a level: "tile" (the GEMM output's (M, N) elements, in its row-major order: a view of it
that keeps the order, such as (M, N) -> (B, S, N), is the same tile), "row" (one per output row, after
a reduction over N) or "scalar" (after a reduction over the rows). An op's tensor arguments are values
of one level, or region inputs read through views and broadcasts: which element of an input each
element of the level reads is found by running the views on a tensor of the input's element offsets,
and it must be an affine function of (row, column) (a bias row has strides (0, 1), a residual (N, 1)).
Two layouts beyond that (epilogue_layout.py): A's rows read in another order than the input stores them (the tile
then takes them in storage order), and views that reorder the tile's values at the end, before the output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.graph import RegionDefinition, RegionNode, decode, references
from autokernel.profile.regions import epilogue_layout as layout
from autokernel.profile.regions.epilogue_ops import FLOATS, Unsupported, number, pointwise

TILE, ROW, SCALAR = "tile", "row", "scalar"
ROW_REDUCTIONS = ("sum", "amax", "amin", "logsumexp")    # combined over column tiles; mean is a sum / N
FULL_REDUCTIONS = ("sum", "amax", "amin", "logsumexp")
_REDUCTION_OPS = {"sum": "sum", "mean": "sum", "amax": "amax", "amin": "amin", "max": "amax", "min": "amin",
                  "logsumexp": "logsumexp"}
_ORDER_KEEPING_VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "flatten", "alias", "clone",
                        "contiguous", "detach", "_reshape_alias", "view_copy", "unsqueeze_copy", "squeeze_copy",
                        "unflatten", "lift_fresh_copy"}
# Views that move each element of the product once, by its logical index (not by strides, as as_strided and
# _reshape_alias do, and never dropping or repeating one, as slice and expand do): what may reorder the product.
_REORDERING_VIEWS = {"permute", "transpose", "t", "movedim", "permute_copy", "transpose_copy", "t_copy"}


@dataclass
class Operand:
    """A region input the epilogue reads: element (r, c) of its level at offset + r * strides[0] + c * strides[1]
    of the input."""
    input: str
    offset: int
    strides: tuple[int, ...]
    level: str


@dataclass
class Epilogue:
    M: int
    N: int
    K: int
    dtype: str                                  # the GEMM operands' dtype
    a: Operand                                  # A (M, K): strides (row, k)
    bt: Operand                                 # B^T (N, K): strides (column, k)
    lines: dict[str, list[str]] = field(default_factory=lambda: {TILE: [], ROW: [], SCALAR: []})
    operands: list[Operand] = field(default_factory=list)    # operand i is read as `o{i}`
    row_reduce: str | None = None               # sum / amax / amin over each row's N columns
    full_reduce: str | None = None              # sum / amax / amin / logsumexp over the rows
    result: str = ""                            # the variable holding the output, at the output's level
    out_level: str = TILE
    out_shape: list[int] = field(default_factory=list)
    out_dtype: str = "float32"
    # Where the tile's element (row, column) lands in the contiguous output: out_base + the row digits of the row
    # + the column digits of the column (epilogue_layout.mixed_radix); None: at row * N + column.
    out_base: int = 0
    out_rows: list | None = None
    out_cols: list | None = None


def read(definition: RegionDefinition) -> Epilogue:
    """The region as a GEMM with an epilogue (see the module's docstring); Unsupported otherwise."""
    return _Reader(definition).read()


class _Reader:
    def __init__(self, definition: RegionDefinition):
        self.d = definition
        self.inputs = {i.name: i for i in definition.inputs}
        self.nodes = {n.name: n for n in definition.nodes}
        self.offsets: dict[str, torch.Tensor] = {}       # input or view-of-input name -> element offsets
        self.values: dict[str, tuple[str, str]] = {}     # computed value name -> (variable, level)
        self.tuples: dict[str, tuple[str, str]] = {}     # an op's (values, indices...) result -> its values
        self.perm: torch.Tensor | None = None            # the tile's row q is the product's row perm[q]
        self.reordered: dict[str, tuple[str, list]] = {}  # a reordering view -> (the plain value, the views to it)
        self.count = 0

    def read(self) -> Epilogue:
        gemms = [n for n in self.d.nodes if ops.kind(ops.resolve(n.op)) == ops.GEMM]
        if len(gemms) != 1 or ops.packet(gemms[0].op) not in ("mm", "addmm"):
            raise Unsupported(f"one mm or addmm wanted, the region has {[ops.packet(g.op) for g in gemms]}")
        if len(self.d.outputs) != 1:
            raise Unsupported("more than one output")
        gemm = gemms[0]
        for item in self.d.inputs:
            span = 1 + sum((size - 1) * step for size, step in zip(item.shape, item.stride) if size > 0)
            self.offsets[item.name] = torch.as_strided(torch.arange(span), item.shape, item.stride)
        before = self.d.nodes[:self.d.nodes.index(gemm)]
        for node in before:                    # only views of inputs come before the GEMM
            if ops.kind(ops.resolve(node.op)) != ops.VIEW:
                raise Unsupported(f"{ops.packet(node.op)} before the GEMM")
            self._view_of_input(node)
        self.e = self._gemm(gemm)
        for node in self.d.nodes[len(before) + 1:]:
            self._node(node)
        out = self.nodes[self.d.outputs[0]]
        if out.name not in self.values:
            raise Unsupported("the output is not computed from the GEMM")
        self.e.result, self.e.out_level = self.values[out.name]
        self.e.out_shape, self.e.out_dtype = list(out.shape or []), out.dtype or "float32"
        if self.e.out_dtype not in FLOATS:
            raise Unsupported(f"a {self.e.out_dtype} output")
        if out.name in self.reordered or self.perm is not None:
            self._output_layout(out.name)
        return self.e

    def _output_layout(self, name: str) -> None:
        """Where each tile element lands, when the tile's rows are out of the product's order or views reorder
        the product before the output (epilogue_layout.py)."""
        M, N = self.shape
        if self.e.out_level != TILE or self.e.row_reduce:
            raise Unsupported("a reduction over the product's rows read out of order")
        if name in self.reordered:
            plain, chain = self.reordered[name]
            positions = layout.reorder_positions(chain, list(self.nodes[plain].shape), self._replay).view(M, N)
            self.e.out_base, self.e.out_rows, self.e.out_cols = layout.output_offsets(positions, self.perm)
        else:                         # only the rows are out of order: row q goes back to row perm[q]
            self.e.out_base, self.e.out_rows, self.e.out_cols = layout.rows_put_back(self.perm, N)

    def _replay(self, node: RegionNode, tensor: torch.Tensor) -> torch.Tensor:
        """One view node run on a tensor standing for its source."""
        return _run_view(node, {references(node.args[0])[0]: tensor})

    # ------------------------------------------------------------------ the GEMM and its operands
    def _gemm(self, node: RegionNode) -> Epilogue:
        addmm = ops.packet(node.op) == "addmm"
        first, second = (node.args[1], node.args[2]) if addmm else (node.args[0], node.args[1])
        a, b = self._input_offsets(first), self._input_offsets(second)
        if a is None or b is None or a[1].dim() != 2 or b[1].dim() != 2:
            raise Unsupported("a GEMM operand is not a 2-D view of an input")
        M, K = a[1].shape
        N = b[1].shape[1]
        dtype = self.inputs[a[0]].dtype
        if dtype not in FLOATS or self.inputs[b[0]].dtype != dtype or node.dtype != dtype:
            raise Unsupported("GEMM operands of another dtype than float16, bfloat16 or float32, or of two")
        try:
            a_op = _with_whole_rows(_affine(a[0], a[1], TILE, "A"), a[1].shape)
        except Unsupported:
            found = layout.rows_in_storage_order(a[1])
            if found is None:
                raise
            offset, steps, self.perm = found
            a_op = Operand(a[0], offset, steps, TILE)
        bt_op = _with_whole_rows(_affine(b[0], b[1].t(), TILE, "B"), (b[1].shape[1], b[1].shape[0]))
        e = Epilogue(M, N, K, dtype, a_op, bt_op)
        self.shape = (M, N)
        variable = "acc"
        if addmm:
            beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
            bias = self._operand(node.args[0], list(node.shape), TILE, e)
            scaled_bias = bias if beta == 1 else f"{number(beta)} * {bias}"
            variable = self._emit(e, TILE, f"{scaled_bias} + {'acc' if alpha == 1 else f'{number(alpha)} * acc'}")
        self.values[node.name] = (variable, TILE)
        return e

    def _view_of_input(self, node: RegionNode) -> None:
        source = references(node.args[0]) if node.args else []
        if len(source) != 1 or source[0] not in self.offsets:
            raise Unsupported(f"{ops.packet(node.op)} of something other than an input")
        try:
            self.offsets[node.name] = _run_view(node, self.offsets)
        except (RuntimeError, TypeError, ValueError) as error:
            raise Unsupported(f"{ops.packet(node.op)} of an input: {error}") from None

    def _input_offsets(self, arg) -> tuple[str, torch.Tensor] | None:
        names = references(arg)
        if len(names) != 1 or names[0] not in self.offsets:
            return None
        name = names[0]
        while name not in self.inputs:                  # the input a view node views
            name = references(self.nodes[name].args[0])[0]
        return name, self.offsets[names[0]]

    def _operand(self, arg, shape: list[int], level: str, e: Epilogue) -> str:
        """The expression of an input read at a value of this level and shape (broadcast to it)."""
        found = self._input_offsets(arg)
        if found is None:
            raise Unsupported("an epilogue argument is neither a value of the epilogue nor an input")
        name, offsets = found
        if self.inputs[name].dtype not in FLOATS:
            raise Unsupported(f"a {self.inputs[name].dtype} input in the epilogue")
        try:
            spread = torch.broadcast_to(offsets, shape).reshape(-1)
        except RuntimeError:
            raise Unsupported(f"an input of shape {list(offsets.shape)} does not broadcast to {shape}") from None
        M, N = self.shape
        grid = {TILE: (M, N), ROW: (M, 1), SCALAR: (1, 1)}[level]
        if spread.numel() != grid[0] * grid[1]:
            raise Unsupported(f"a {level} value of {spread.numel()} elements")
        spread = spread.reshape(grid)
        if self.perm is not None and level != SCALAR:        # read at the tile's rows, in their order
            spread = spread[self.perm]
        operand = _affine(name, spread, level, "an epilogue input")
        e.operands.append(operand)
        return f"o{len(e.operands) - 1}"

    # ------------------------------------------------------------------ the epilogue's ops
    def _emit(self, e: Epilogue, level: str, expression: str) -> str:
        self.count += 1
        variable = f"v{self.count}"
        e.lines[level].append(f"{variable} = {expression}")
        return variable

    def _node(self, node: RegionNode) -> None:
        target = ops.resolve(node.op)
        kind, name = ops.kind(target), ops.packet(node.op)
        source = references(node.args[0]) if node.args else []
        if kind == ops.VIEW and source and source[0] in self.offsets:
            self._view_of_input(node)
            return
        if name == "getitem":          # the values of max.dim or of a batch norm; never indices or statistics
            if not source or source[0] not in self.tuples or node.args[1] != 0:
                raise Unsupported("an item of a result other than its values")
            self.values[node.name] = self.tuples[source[0]]
            return
        if kind == ops.VIEW:
            if not source or source[0] not in self.values:
                raise Unsupported(f"{name} of something other than a value of the epilogue")
            reordered = source[0] in self.reordered
            # _reshape_alias keeps a row-major value's order, but reads a reordered one by its strides
            allowed = (_ORDER_KEEPING_VIEWS - ({"_reshape_alias"} if reordered else set())) | _REORDERING_VIEWS
            if name not in allowed:
                raise Unsupported(f"{name}, which reorders the GEMM's output other than by permuting it")
            self.values[node.name] = self.values[source[0]]
            if reordered:
                plain, chain = self.reordered[source[0]]
                self.reordered[node.name] = (plain, chain + [node])
            elif name not in _ORDER_KEEPING_VIEWS:
                if self.values[source[0]][1] != TILE:
                    raise Unsupported(f"{name}, which reorders a reduced value")
                self.reordered[node.name] = (source[0], [node])
            return
        used = {r for a in [*node.args, *node.kwargs.values()] for r in references(a)}
        if used & set(self.reordered):
            raise Unsupported(f"{name} after a view that reorders the GEMM's output (only views may follow one)")
        if kind == ops.REDUCTION:
            self._reduction(node, name)
            return
        if name in ("_softmax", "_log_softmax", "softmax", "log_softmax") and source and source[0] in self.values \
                and self.values[source[0]][1] != TILE and self.nodes[source[0]].shape[node.args[1]] == 1:
            variable, level = self.values[source[0]]         # over a dim of size 1: exp(x - x), or x - x
            difference = f"({variable} - {variable})"
            expression = difference if "log" in name else f"tl.exp({difference})"
            self.values[node.name] = (self._emit(self.e, level, expression), level)
            return
        if name in ("_native_batch_norm_legit_no_training", "native_batch_norm"):
            self._batch_norm(node, name)
            return
        if kind != ops.POINTWISE:
            raise Unsupported(f"{name} ({kind}) in the epilogue")
        levels = {self.values[r][1] for a in [*node.args, *node.kwargs.values()] for r in references(a)
                  if r in self.values}
        if len(levels) != 1:
            raise Unsupported(f"{name} of {'no value' if not levels else 'values of two levels'} of the epilogue")
        level = levels.pop()
        shape = list(node.shape or [])

        def value(arg):
            if isinstance(arg, dict) and "ref" in arg:
                if arg["ref"] in self.values:
                    return self.values[arg["ref"]][0]
                return self._operand(arg, shape, level, self.e)
            if isinstance(arg, (bool, int, float)):
                if isinstance(arg, float) and not math.isfinite(arg):
                    raise Unsupported(f"{name} with {arg}")
                return arg
            if arg is None or isinstance(arg, str) or (isinstance(arg, dict) and set(arg) & {"dtype", "layout",
                                                                                               "device"}):
                return arg
            raise Unsupported(f"{name} with the argument {arg!r}")
        args = [value(a) for a in node.args]
        kwargs = {k: value(v) for k, v in node.kwargs.items()}
        expression = pointwise(name, args, kwargs)
        self.values[node.name] = (self._emit(self.e, level, expression), level)

    def _reduction(self, node: RegionNode, name: str) -> None:
        source = references(node.args[0]) if node.args else []
        if name not in _REDUCTION_OPS or not source or source[0] not in self.values:
            raise Unsupported(f"{name} in the epilogue")
        if {k for k, v in node.kwargs.items() if v is not None} - {"keepdim"}:
            raise Unsupported(f"{name} with {sorted(node.kwargs)}")
        variable, level = self.values[source[0]]
        shape = self.nodes[source[0]].shape
        dims = node.args[1] if len(node.args) > 1 else []
        dims = sorted({d % len(shape) for d in ([dims] if isinstance(dims, int) else dims)}) or list(range(len(shape)))
        kept = math.prod(s for i, s in enumerate(shape) if i not in dims)
        op = _REDUCTION_OPS[name]
        M, N = self.shape
        if level == TILE and dims == list(range(dims[0], len(shape))) and kept == M and op in ROW_REDUCTIONS:
            if self.e.row_reduce is not None:
                raise Unsupported("two reductions over the rows' columns")
            self.e.row_reduce = op
            self.e.lines[TILE].append(f"reduced = {variable}")
            result = "r" if name != "mean" else self._emit(self.e, ROW, f"r / {float(N)!r}")
            self._result(node, (result, ROW))
        elif level != TILE and kept == math.prod(shape):       # over dims of size 1: each value is its own result
            self._result(node, (variable, level))
        elif level == ROW and kept == 1 and op in FULL_REDUCTIONS:
            if self.e.full_reduce is not None:
                raise Unsupported("two reductions over the rows")
            self.e.full_reduce = op
            self.e.lines[ROW].append(f"reduced = {variable}")
            result = "s" if name != "mean" else self._emit(self.e, SCALAR, f"s / {float(M)!r}")
            self._result(node, (result, SCALAR))
        else:
            raise Unsupported(f"{name} over dims {dims} of a {level} value of shape {shape}")


    def _result(self, node: RegionNode, value: tuple[str, str]) -> None:
        """A reduction's value; max.dim's and min.dim's results are (values, indices), of which getitem 0 is read."""
        if node.shape is None:
            self.tuples[node.name] = value
        else:
            self.values[node.name] = value

    def _batch_norm(self, node: RegionNode, name: str) -> None:
        """Inference batch norm over the columns of a 2-D (M, N) tile: (x - mean) / sqrt(var + eps) * w + b."""
        x, weight, bias, mean, var = node.args[:5]
        if name == "native_batch_norm" and (len(node.args) < 8 or node.args[5] is not False):
            raise Unsupported("a batch norm in training (its batch's statistics)")
        eps = node.args[-1] if len(node.args) in (7, 8) else None
        source = references(x)
        if not source or source[0] not in self.values or self.values[source[0]][1] != TILE \
                or list(self.nodes[source[0]].shape) != list(self.shape) or not isinstance(eps, (int, float)):
            raise Unsupported("a batch norm of other than the (M, N) product")
        shape = list(self.shape)
        read = {key: (self._operand(arg, shape, TILE, self.e) if arg is not None else None)
                for key, arg in (("w", weight), ("b", bias), ("mean", mean), ("var", var))}
        if read["mean"] is None or read["var"] is None:
            raise Unsupported("a batch norm without running statistics")
        expression = f"({self.values[source[0]][0]} - {read['mean']}) * tl.rsqrt({read['var']} + {number(eps)})"
        if read["w"] is not None:
            expression = f"{expression} * {read['w']}"
        if read["b"] is not None:
            expression = f"{expression} + {read['b']}"
        self.tuples[node.name] = (self._emit(self.e, TILE, expression), TILE)


def _run_view(node: RegionNode, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """A view node run on the CPU, its references read from tensors (element offsets, or indices of the product)."""
    cpu = torch.device("cpu")
    args = [decode(a, tensors, cpu, None) for a in node.args]
    kwargs = {k: decode(v, tensors, cpu, None) for k, v in node.kwargs.items()}
    return ops.resolve(node.op)(*args, **kwargs)


def _with_whole_rows(operand: Operand, shape) -> Operand:
    """A GEMM operand of one row (M = 1, or N = 1) stepped as if its rows were whole: a step of 0 is no row
    step TMA can describe, and the one row read is the same."""
    if shape[0] == 1:
        operand.strides = (shape[1] * operand.strides[1], operand.strides[1])
    return operand


def _affine(name: str, offsets: torch.Tensor, level: str, what: str) -> Operand:
    """Offsets as offset + row * s0 + column * s1 over the 2-D offsets (rows, columns); Unsupported if not affine."""
    rows, cols = offsets.shape
    base = int(offsets[0, 0])
    s0 = int(offsets[1, 0]) - base if rows > 1 else 0
    s1 = int(offsets[0, 1]) - base if cols > 1 else 0
    expected = base + torch.arange(rows)[:, None] * s0 + torch.arange(cols)[None, :] * s1
    if not torch.equal(offsets, expected):
        raise Unsupported(f"{what} ({name}) is not read with one step per row and one per column")
    steps = {TILE: (s0, s1), ROW: (s0,), SCALAR: ()}[level]
    return Operand(name, base, steps, level)


__all__ = ["Epilogue", "Operand", "read", "TILE", "ROW", "SCALAR"]
