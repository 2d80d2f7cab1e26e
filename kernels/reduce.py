"""Reduce starter: sum, mean, max or min of a tensor of any rank over one dimension, in Triton, in float32;
max_dim and min_dim (torch.max / torch.min(x, dim)) also return the index of each extreme value.

The contiguous input is viewed as (outer, R, inner) and reduced over R in place, whatever the
dimension, without a transposing copy. When R is the last dimension and there are rows enough to
fill the GPU, a row kernel reads each row along R, several short rows to a program; a row that
fits in one block is one load and one reduction, with no accumulator, so programs need few
registers and many fit on a multiprocessor (a read-only pass has to keep twice the bytes in
flight of a copy's read side to match its bandwidth). Otherwise one strided kernel serves both
layouts: a program reads a band of contiguous inner columns (or rows, when R is last) and walks
down R. When that leaves too few programs to fill the GPU, the bands are first narrowed (one
launch still); only if programs are still too few and each would stream a lot of memory, R is
split across programs that write float32 partial results, and a second launch of the same kernel
reduces the partials in a fixed order (no atomics, so results are bitwise reproducible). A small
reduction is bound by host time (each launch and allocation costs tens of microseconds of
Python), so it stays one launch, and its plan is cached per shape. Input streams through L2 marked
evict-first. Like torch.amax and torch.amin, max and min propagate nan; min is the max of -x, and
mean is the float32 sum scaled by 1 / R as it is stored. max_dim and min_dim carry an int32 index
beside every value and keep, of two, the one torch.max keeps: a nan over any number, else the
larger, and of equal values (or two nans) the smaller index, so the first extreme of a line wins
whatever order its elements are combined in; split partials keep their indices too.
"""

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"

# Tunable parameters: the built-in search agent edits this dict and nothing else.
# MAX_BLOCK_R: widest contiguous reduced row read in one block (longer rows are read in chunks).
# STRIDED_BLOCK_INNER: contiguous columns per program when the reduced dimension is not last.
# TILE_ELEMS: target elements per program tile (rows per program, or R rows per loop step).
# MIN_PROGRAMS: below this many programs, strided bands are narrowed, then R may be split (and the
#   row kernel is not used).
# MIN_STRIDED_BLOCK_INNER: the narrowest band of columns a strided program may take to reach MIN_PROGRAMS.
# SPLIT_MIN_BYTES: R is split only if each program would otherwise stream at least this many bytes
#   (below that, the second launch and the partials' allocation cost more than they save).
# ELEMS_PER_THREAD and MAX_NUM_WARPS set num_warps from the tile size.
TUNABLES = {"MAX_BLOCK_R": 8192, "STRIDED_BLOCK_INNER": 64, "TILE_ELEMS": 4096, "MIN_PROGRAMS": 264,
            "MIN_STRIDED_BLOCK_INNER": 16, "SPLIT_MIN_BYTES": 1048576,
            "ELEMS_PER_THREAD": 32, "MAX_NUM_WARPS": 16, "num_stages": 2}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"MAX_BLOCK_R": [1024, 2048, 4096, 8192, 16384],
                   "STRIDED_BLOCK_INNER": [16, 32, 64, 128, 256],
                   "TILE_ELEMS": [1024, 2048, 4096, 8192, 16384],
                   "MIN_PROGRAMS": [1, 132, 264, 528, 1056],
                   "MIN_STRIDED_BLOCK_INNER": [16, 32, 64, 128, 256],
                   "SPLIT_MIN_BYTES": [0, 262144, 1048576, 4194304, 16777216],
                   "ELEMS_PER_THREAD": [4, 8, 16, 32], "MAX_NUM_WARPS": [4, 8, 16, 32],
                   "num_stages": [1, 2, 3, 4]}

OPS = ("sum", "mean", "max", "min", "max_dim", "min_dim")
NO_INDEX = tl.constexpr(2**31 - 1)    # the index of padding: any real element of a line beats it, even a -inf


@triton.jit
def _load(ptrs, mask, IS_MAX: tl.constexpr, NEGATE: tl.constexpr):
    """Values in float32 (negated for a min), the op's identity where masked; x is read once, so it leaves L2 first."""
    if NEGATE:
        x = -tl.load(ptrs, mask=mask, other=float("inf"), eviction_policy="evict_first").to(tl.float32)
    elif IS_MAX:
        x = tl.load(ptrs, mask=mask, other=-float("inf"), eviction_policy="evict_first").to(tl.float32)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    return x


@triton.jit
def _combine(acc, x, IS_MAX: tl.constexpr):
    if IS_MAX:
        acc = tl.maximum(acc, x, propagate_nan=tl.PropagateNan.ALL)
    else:
        acc += x
    return acc


@triton.jit
def _first_extreme(a, a_index, b, b_index):
    """Of two (value, index) pairs, the one torch.max keeps: nan first, then the larger, ties to the smaller index."""
    a_nan = a != a
    b_nan = b != b
    a_wins = (a > b) | (a_nan & ~b_nan) | (((a == b) | (a_nan & b_nan)) & (a_index < b_index))
    return tl.where(a_wins, a, b), tl.where(a_wins, a_index, b_index)


@triton.jit
def _store_with_index(out_ptrs, index_ptrs, acc, acc_index, mask, AXIS: tl.constexpr, NEGATE: tl.constexpr):
    """Store what _first_extreme keeps of each line's lanes. Built-in reductions, not one tl.reduce with it as the
    combine: the interpreter runs a custom combine element by element, a thousand times slower."""
    is_nan = acc != acc
    has_nan = tl.max(is_nan.to(tl.int32), axis=AXIS) > 0
    largest = tl.max(tl.where(is_nan, -float("inf"), acc), axis=AXIS)
    holds = tl.where(tl.expand_dims(has_nan, AXIS), is_nan, acc == tl.expand_dims(largest, AXIS))
    index = tl.min(tl.where(holds, acc_index, NO_INDEX), axis=AXIS)
    # The winning lane's own value: of 0.0 and -0.0, which compare equal, the first is kept, as torch.max does.
    first = holds & (acc_index == tl.expand_dims(index, AXIS))
    value = tl.where(has_nan, float("nan"), tl.max(tl.where(first, acc, -float("inf")), axis=AXIS))
    if NEGATE:
        value = -value
    tl.store(out_ptrs, value.to(out_ptrs.dtype.element_ty), mask=mask)
    tl.store(index_ptrs, index.to(index_ptrs.dtype.element_ty), mask=mask)


@triton.jit
def _result(acc, scale, AXIS: tl.constexpr, IS_MAX: tl.constexpr, NEGATE: tl.constexpr):
    if IS_MAX:
        # tl.max may drop nan on a GPU; counting nan lanes costs one reduction per program.
        has_nan = tl.sum((acc != acc).to(tl.int32), axis=AXIS) > 0
        result = tl.where(has_nan, float("nan"), tl.max(acc, axis=AXIS))
        if NEGATE:
            result = -result
    else:
        result = tl.sum(acc, axis=AXIS) * scale
    return result


@triton.jit
def _reduce_rows(x_ptr, out_ptr, index_in_ptr, index_ptr, n_rows, n_cols, row_stride, scale,
                 IS_MAX: tl.constexpr, NEGATE: tl.constexpr, INDEX: tl.constexpr, ROWS: tl.constexpr,
                 BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    # index_in_ptr: unused (the row kernel never reads partials); one signature for both kernels.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    x_rows = x_ptr + rows[:, None] * row_stride
    if ONE_BLOCK:
        cols = tl.arange(0, BLOCK_N)
        acc = _load(x_rows + cols[None, :], row_mask[:, None] & (cols < n_cols)[None, :], IS_MAX, NEGATE)
        if INDEX:
            acc_index = tl.broadcast_to(tl.where(cols < n_cols, cols, NO_INDEX)[None, :], [ROWS, BLOCK_N])
    else:
        if IS_MAX:
            acc = tl.full([ROWS, BLOCK_N], -float("inf"), tl.float32)
        else:
            acc = tl.zeros([ROWS, BLOCK_N], tl.float32)
        if INDEX:
            acc_index = tl.full([ROWS, BLOCK_N], NO_INDEX, tl.int32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = _load(x_rows + cols[None, :], row_mask[:, None] & (cols < n_cols)[None, :], IS_MAX, NEGATE)
            if INDEX:
                acc, acc_index = _first_extreme(acc, acc_index, x, tl.where(cols < n_cols, cols, NO_INDEX)[None, :])
            else:
                acc = _combine(acc, x, IS_MAX)
    if INDEX:
        _store_with_index(out_ptr + rows, index_ptr + rows, acc, acc_index, row_mask, 1, NEGATE)
    else:
        tl.store(out_ptr + rows, _result(acc, scale, 1, IS_MAX, NEGATE).to(out_ptr.dtype.element_ty), mask=row_mask)


@triton.jit
def _reduce_over_r(x_ptr, out_ptr, index_in_ptr, index_ptr, n_reduce, n_inner, inner_blocks, reduce_per_split,
                   x_stride_outer, x_stride_reduce, x_stride_inner,
                   out_stride_outer, out_stride_split, out_stride_inner, scale,
                   IS_MAX: tl.constexpr, NEGATE: tl.constexpr, INDEX: tl.constexpr, READ_INDEX: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_INNER: tl.constexpr):
    # Axis 0 covers (outer, inner block) pairs, which may outnumber axis 1's 65535 limit.
    # READ_INDEX: x is the partials of a split, whose indices are read beside them (index_in_ptr, same strides).
    pid = tl.program_id(0).to(tl.int64)
    outer = pid // inner_blocks
    inner = (pid % inner_blocks) * BLOCK_INNER + tl.arange(0, BLOCK_INNER)
    inner_mask = inner < n_inner
    split = tl.program_id(1).to(tl.int64)
    r_begin = split * reduce_per_split
    r_end = tl.minimum(r_begin + reduce_per_split, n_reduce)
    cols = outer * x_stride_outer + inner[None, :] * x_stride_inner
    if IS_MAX:
        acc = tl.full([BLOCK_R, BLOCK_INNER], -float("inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK_R, BLOCK_INNER], tl.float32)
    if INDEX:
        acc_index = tl.full([BLOCK_R, BLOCK_INNER], NO_INDEX, tl.int32)
    for start in range(r_begin, r_end, BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        mask = (r < r_end)[:, None] & inner_mask[None, :]
        offsets = cols + r[:, None] * x_stride_reduce
        x = _load(x_ptr + offsets, mask, IS_MAX, NEGATE)
        if INDEX:
            if READ_INDEX:
                index = tl.load(index_in_ptr + offsets, mask=mask, other=NO_INDEX).to(tl.int32)
            else:
                index = tl.where(r < r_end, r, NO_INDEX).to(tl.int32)[:, None]
            acc, acc_index = _first_extreme(acc, acc_index, x, index)
        else:
            acc = _combine(acc, x, IS_MAX)
    out = outer * out_stride_outer + split * out_stride_split + inner * out_stride_inner
    if INDEX:
        _store_with_index(out_ptr + out, index_ptr + out, acc, acc_index, inner_mask, 0, NEGATE)
    else:
        tl.store(out_ptr + out, _result(acc, scale, 0, IS_MAX, NEGATE).to(out_ptr.dtype.element_ty), mask=inner_mask)


# A launch names its kernel (the plan is cached by key, the kernels are not part of it).
_KERNELS = {"_reduce_rows": _reduce_rows, "_reduce_over_r": _reduce_over_r}


def _num_warps(tile_elems: int) -> int:
    """Enough warps that each thread holds about ELEMS_PER_THREAD elements of the tile."""
    warps = triton.next_power_of_2(max(1, tile_elems // (32 * TUNABLES["ELEMS_PER_THREAD"])))
    return min(warps, TUNABLES["MAX_NUM_WARPS"])


class _Launch(NamedTuple):
    """One kernel launch of a plan. The kernel is named, not held, so that it is looked up when launched."""
    kernel: str
    grid: tuple
    reads_partials: bool       # reads the float32 partials, and their int32 indices (else x)
    writes_partials: bool      # writes the partials (else the output and its indices)
    args: tuple                # the scalar arguments after the four pointers
    meta: dict                 # constexprs, num_warps, num_stages


class _Plan(NamedTuple):
    out_shape: tuple
    partials_shape: tuple | None   # (outer, splits, inner) float32, only when R is split
    launches: tuple
    with_index: bool               # max_dim / min_dim: int64 indices beside the values


def _flags(op: str) -> dict:
    """The kernels' constexprs for an op: a max (min is the max of -x), and whether indices come with it."""
    return dict(IS_MAX=op in ("max", "min", "max_dim", "min_dim"), NEGATE=op in ("min", "min_dim"),
                INDEX=op in ("max_dim", "min_dim"))


def _tiles(n_outer: int, n_reduce: int, n_inner: int, reduce_is_contiguous: bool) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_INNER): the tile is long along whichever axis is contiguous in memory.

    Strided: when bands of STRIDED_BLOCK_INNER columns make too few programs, the bands are
    narrowed first (down to MIN_STRIDED_BLOCK_INNER columns, still whole 32-byte sectors for
    4-byte values): that fills the GPU in the same single launch, where splitting R costs a second
    launch and an allocation."""
    if reduce_is_contiguous:
        block_r = min(triton.next_power_of_2(n_reduce), TUNABLES["MAX_BLOCK_R"])
        block_inner = min(max(1, TUNABLES["TILE_ELEMS"] // block_r), triton.next_power_of_2(n_inner))
        return block_r, block_inner
    block_inner = min(triton.next_power_of_2(n_inner), TUNABLES["STRIDED_BLOCK_INNER"])
    while (block_inner > TUNABLES["MIN_STRIDED_BLOCK_INNER"]
           and n_outer * triton.cdiv(n_inner, block_inner) < TUNABLES["MIN_PROGRAMS"]):
        block_inner //= 2
    block_r = min(max(1, TUNABLES["TILE_ELEMS"] // block_inner), triton.next_power_of_2(n_reduce))
    return block_r, block_inner


def _split(n_reduce: int, block_r: int, programs: int) -> tuple[int, int]:
    """(R rows per split, number of splits): enough splits to reach MIN_PROGRAMS, none of them empty."""
    r_blocks = triton.cdiv(n_reduce, block_r)
    wanted = min(r_blocks, triton.cdiv(TUNABLES["MIN_PROGRAMS"], programs))
    reduce_per_split = triton.cdiv(r_blocks, max(wanted, 1)) * block_r
    return reduce_per_split, triton.cdiv(n_reduce, reduce_per_split)


def _over_r(n_outer, n_reduce, n_inner, x_strides, out_strides, op, scale, block_r, block_inner, reduce_per_split,
            splits, reads_partials, writes_partials) -> _Launch:
    inner_blocks = triton.cdiv(n_inner, block_inner)
    return _Launch("_reduce_over_r", (n_outer * inner_blocks, splits), reads_partials, writes_partials,
                   (n_reduce, n_inner, inner_blocks, reduce_per_split, *x_strides, *out_strides, scale),
                   dict(**_flags(op), READ_INDEX=reads_partials, BLOCK_R=block_r, BLOCK_INNER=block_inner,
                        num_warps=_num_warps(block_r * block_inner), num_stages=TUNABLES["num_stages"]))


def _rows(n_rows, n_cols, op, scale) -> _Launch | None:
    """The row kernel over contiguous rows, if that makes programs enough."""
    block_n = triton.next_power_of_2(max(n_cols, 1))
    one_block = block_n <= TUNABLES["MAX_BLOCK_R"]
    block_n = min(block_n, TUNABLES["MAX_BLOCK_R"])
    rows = min(max(1, TUNABLES["TILE_ELEMS"] // block_n), triton.next_power_of_2(n_rows))
    programs = triton.cdiv(n_rows, rows)
    if programs < TUNABLES["MIN_PROGRAMS"]:
        return None
    return _Launch("_reduce_rows", (programs,), False, False, (n_rows, n_cols, n_cols, scale),
                   dict(**_flags(op), ROWS=rows, BLOCK_N=block_n, ONE_BLOCK=one_block,
                        num_warps=_num_warps(rows * block_n)))


def _plan(shape: torch.Size, dim: int, op: str, dtype: torch.dtype) -> _Plan:
    """Check the rest of the arguments and decide the launches; everything here depends only on the cache key."""
    if not dtype.is_floating_point:
        raise TypeError(f"reduce: x must be a floating-point tensor, got {dtype}")
    sizes = list(shape) or [1]
    if not -len(sizes) <= dim < len(sizes):
        raise IndexError(f"reduce: dim {dim} is out of range for a tensor of shape {tuple(shape)}")
    dim %= len(sizes)
    n_outer, n_reduce, n_inner = math.prod(sizes[:dim]), sizes[dim], math.prod(sizes[dim + 1:])
    out_shape = tuple(shape[:dim] + shape[dim + 1:])
    with_index = _flags(op)["INDEX"]
    if n_reduce == 0 and _flags(op)["IS_MAX"]:
        raise ValueError(f"reduce: {op} over dimension {dim} of size 0 has no identity")
    if with_index and n_reduce >= NO_INDEX.value:
        raise ValueError(f"reduce: {op} over {n_reduce} elements: indices are counted in int32")
    if n_outer * n_inner == 0:
        return _Plan(out_shape, None, (), with_index)
    # The mean's 1 / R is applied where the final result is stored (a mean over nothing is nan, as in PyTorch).
    scale = (1.0 / n_reduce if n_reduce else float("nan")) if op == "mean" else 1.0
    rows = _rows(n_outer, n_reduce, op, scale) if n_inner == 1 else None
    if rows is not None:
        return _Plan(out_shape, None, (rows,), with_index)
    # A reduction over the last dimension is the same problem with the rows as the inner axis:
    # then R is contiguous and one program can take several rows.
    if n_inner == 1:
        n_outer, n_inner = 1, n_outer
        x_strides = (0, 1, n_reduce)
    else:
        x_strides = (n_reduce * n_inner, n_inner, 1)
    n_reduce_blocks = max(n_reduce, 1)
    block_r, block_inner = _tiles(n_outer, n_reduce_blocks, n_inner, x_strides[1] == 1)
    programs = n_outer * triton.cdiv(n_inner, block_inner)
    reduce_per_split, splits = _split(n_reduce_blocks, block_r, programs)
    # Splitting costs a second launch and an allocation, tens of microseconds of host time: worth it
    # only when each of the too few programs would otherwise stream SPLIT_MIN_BYTES or more.
    bytes_per_program = n_outer * n_reduce * n_inner * dtype.itemsize // programs
    out_strides = (n_inner, 0, 1)
    if splits == 1 or bytes_per_program < TUNABLES["SPLIT_MIN_BYTES"]:
        return _Plan(out_shape, None, (_over_r(n_outer, n_reduce, n_inner, x_strides, out_strides, op, scale,
                                               block_r, block_inner, n_reduce_blocks, 1, False, False),), with_index)
    # Partial sums are not yet scaled; partial minima are stored as minima and negated again when read;
    # partial extremes keep the index of each within the whole line, so the second launch breaks ties as one would.
    partials_strides = (splits * n_inner, n_inner, 1)
    first = _over_r(n_outer, n_reduce, n_inner, x_strides, partials_strides, op, 1.0, block_r, block_inner,
                    reduce_per_split, splits, False, True)
    block_r, block_inner = _tiles(n_outer, splits, n_inner, n_inner == 1)
    second = _over_r(n_outer, splits, n_inner, partials_strides, out_strides, op, scale, block_r, block_inner,
                     triton.cdiv(splits, block_r) * block_r, 1, True, False)
    return _Plan(out_shape, (n_outer, splits, n_inner), (first, second), with_index)


# Launch plans by (shape, dim, op, dtype, tunables): a call of a known shape skips the planning.
_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 256


def kernel_fn(x: torch.Tensor, dim: int = -1, op: str = "sum"):
    """x reduced over dim by op; for max_dim and min_dim, the pair (values, int64 indices) torch.max(x, dim) gives."""
    if not isinstance(dim, int):
        raise TypeError(f"reduce: dim must be a single int, got {dim!r}")
    if op not in OPS:
        raise ValueError(f"reduce: unknown op {op!r} (expected one of {', '.join(OPS)})")
    key = (x.shape, dim, op, x.dtype, tuple(TUNABLES.values()))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(x.shape, dim, op, x.dtype)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    out = torch.empty(plan.out_shape, dtype=x.dtype, device=x.device)
    # Without indices the kernels never touch their index pointers: the output stands in for them.
    indices = torch.empty(plan.out_shape, dtype=torch.int64, device=x.device) if plan.with_index else out
    if plan.launches:
        x = x.contiguous()
        partials = partial_indices = None
        if plan.partials_shape is not None:
            partials = torch.empty(plan.partials_shape, dtype=torch.float32, device=x.device)
            partial_indices = (torch.empty(plan.partials_shape, dtype=torch.int32, device=x.device)
                               if plan.with_index else partials)
        for launch in plan.launches:
            source, source_indices = (partials, partial_indices) if launch.reads_partials else (x, indices)
            target, target_indices = (partials, partial_indices) if launch.writes_partials else (out, indices)
            _KERNELS[launch.kernel][launch.grid](source, target, source_indices, target_indices, *launch.args,
                                                 **launch.meta)
    return (out, indices) if plan.with_index else out
