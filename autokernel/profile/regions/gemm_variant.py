"""A GEMM region's other starter: the project's GEMM tile on the tensor cores with the region's epilogue in it.

Inductor's starter for a region with a GEMM is its Triton GEMM template, which for float32 multiplies in
IEEE on the CUDA cores: half of torch.compile's speed on an H100, where torch.compile calls cuBLAS
(benchmarks/results/2026-11-27_NVIDIA-H100_region_starters). This variant is the menu's matmul
(kernels/matmul.py: its plan for the shape, tf32x3 for float32, three TF32 products, within float32's
tolerance) with the region's epilogue (epilogue.py) applied to each accumulator tile before the store:
  - operands by TMA where they allow it (Hopper or the interpreter, unit last stride, 16-byte rows and
    start), B read as the transpose of (N, K) rows (an nn.Linear weight) or as (K, N) rows, else by
    pointer loads;
  - a reduction over each row's N columns writes per-column-tile partials (tiles_n, M) in float32, which a
    second kernel combines in tile order (the same bits every run), finishing the row ops; a reduction
    over the rows after it runs in one program that walks every row.
`variant(region, device)` returns it as a `GemmVariant` for starter.write, or None where the region is not a
GEMM with an epilogue epilogue.py can write (the region keeps Inductor's starter alone, as before).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from autokernel.kernel_types.regions.graph import torch_dtype
from autokernel.kernel_types.regions.record import Region
from autokernel.profile.regions import epilogue as ep
from autokernel.profile.regions import epilogue_layout as layout
from autokernel.profile.regions.epilogue_ops import Unsupported

VARIANT = "engine"
ROWS_BLOCK = 256                 # rows per program of the row finisher
TOTAL_BLOCK = 1024               # rows per step of the one program that reduces over every row
_NEUTRAL = {"sum": "0.0", "amax": 'float("-inf")', "amin": 'float("inf")', "logsumexp": 'float("-inf")'}
_COMBINE = {"sum": "{a} + {b}", "amax": "tl.maximum({a}, {b})", "amin": "tl.minimum({a}, {b})"}
_REDUCE = {"sum": "tl.sum({v}, axis={axis})", "amax": "tl.max({v}, axis={axis})", "amin": "tl.min({v}, axis={axis})"}
_TL_DTYPES = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}
CHOICES = {"gemm_BLOCK_M": [32, 64, 128, 256], "gemm_BLOCK_N": [32, 64, 128, 256], "gemm_BLOCK_K": [16, 32, 64, 128],
           "gemm_GROUP_M": [1, 4, 8, 16], "gemm_num_warps": [4, 8], "gemm_num_stages": [2, 3, 4, 5],
           "gemm_precision": ["tf32x3", "ieee"], "gemm_tma": [True, False]}


@functools.lru_cache(maxsize=1)
def _matmul_starter():
    from autokernel.core import paths
    from autokernel.core.kernel_file import import_file

    return import_file(paths.starter_path("matmul"), "autokernel_matmul_starter_plan")


def _has_tma(device: torch.device) -> bool:
    return device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 9


def plan(e: ep.Epilogue, device: torch.device) -> dict:
    """TUNABLES of the tile: the menu matmul's plan for the shape (its measured table for 16-bit products)."""
    if device.type == "cuda" and device.index is None:       # the matmul starter reads the GPU's properties by index
        device = torch.device("cuda", torch.cuda.current_device())
    p = _matmul_starter().plan(e.M, e.N, e.K, torch_dtype(e.dtype), device, split_k=False)   # one tile, no K slices
    tma = _has_tma(device)
    size = 2 if e.dtype != "float32" else 4
    tma_possible = (e.a.strides[1] == 1 and (e.a.strides[0] * size) % 16 == 0
                    and (e.bt.strides[1] == 1 and (e.bt.strides[0] * size) % 16 == 0
                         or e.bt.strides[0] == 1 and (e.bt.strides[1] * size) % 16 == 0))
    chosen = {"gemm_BLOCK_M": p.block_m, "gemm_BLOCK_N": p.block_n, "gemm_BLOCK_K": p.block_k, "gemm_GROUP_M": 8,
              "gemm_num_warps": p.warps, "gemm_num_stages": p.stages}
    if e.dtype == "float32":     # wgmma reads float32 operands from shared memory K-major only: TMA or IEEE
        chosen["gemm_precision"] = "tf32x3" if tma and tma_possible else "ieee"
    chosen["gemm_tma"] = tma and tma_possible
    return chosen


def variant(region: Region, device: torch.device, log: Callable[[str], None] = lambda line: None) -> GemmVariant | None:
    """The region's GEMM-with-epilogue variant, or None when epilogue.py cannot read the region as one (said to log
    where the region holds a GEMM)."""
    try:
        e = ep.read(region.definition)
    except Unsupported as why:
        if "gemm" in region.about.kinds:
            log(f"{region.label}: no GEMM-engine variant ({why}); Inductor's starter alone")
        return None
    except Exception as error:      # a reader's own bug costs this variant only, never the region's starter
        log(f"{region.label}: no GEMM-engine variant (reading its epilogue failed: {type(error).__name__}: "
            f"{error}); Inductor's starter alone")
        return None
    return GemmVariant(e, plan(e, device))


class GemmVariant:
    """One variant of a region's starter (starter.write calls `emit`): kernels, TUNABLES and kernel_fn's lines."""

    def __init__(self, e: ep.Epilogue, tunables: dict):
        self.e, self.tunables = e, tunables

    def emit(self, region: Region, suffix: str, tunables: dict, choices: dict, kernels: list[str],
             legend: list[str]) -> list[str]:
        e = self.e
        for key, value in self.tunables.items():
            tunables.setdefault(key, value)
            choices.setdefault(key, sorted(set(CHOICES[key]) | {value}) if key != "gemm_tma"
                               else ([True, False] if value else [False]))     # no TMA where the operands refuse it
        names = {"tile": f"gemm_epilogue{suffix}", "rows": f"gemm_rows{suffix}", "total": f"gemm_total{suffix}",
                 "tma": f"_gemm_tma_ok{suffix}"}
        kernels += [_tma_helper(names["tma"]), _tile_kernel(e, names["tile"])]
        legend.append(f"#   {names['tile']}: the GEMM (the menu matmul's plan) with the epilogue on each tile")
        if e.row_reduce:
            finisher = names["total"] if e.full_reduce else names["rows"]
            kernels.append(_finisher(e, finisher))
            legend.append(f"#   {finisher}: the rows' partials combined, then the ops after the reduction")
        return _body(region, e, names)


def _tma_helper(name: str) -> str:
    return f'''import functools

from torch._subclasses.fake_tensor import is_fake
from triton.tools.tensor_descriptor import TensorDescriptor


@functools.lru_cache(maxsize=None)
def {name}_device(device: torch.device) -> bool:
    return device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 9


def {name}(*views) -> bool:
    """Whether TMA can read each 2-D view: Hopper or later (or the interpreter), 16-byte aligned starts. Traced by
    torch.compile on fake tensors, which have no memory, the start is the view's offset into its storage (the
    allocator aligns a storage to 512 bytes)."""
    return {name}_device(views[0].device) and all(
        (v.storage_offset() * v.element_size() if is_fake(v) else v.data_ptr()) % 16 == 0 for v in views)'''


def _load(index: int, operand: ep.Operand, level: str) -> str:
    """The line that reads operand `index` at the level's rows (r64) and columns (c64), as float32."""
    pointer = f"o_ptr{index} + {operand.offset}"
    steps = operand.strides
    if level == ep.TILE and steps[0] and steps[1]:
        address, mask, shape = f"{pointer} + r64[:, None] * {steps[0]} + c64[None, :] * {steps[1]}", "inside", ""
    elif level == ep.TILE and steps[1]:
        address, mask, shape = f"{pointer} + c64 * {steps[1]}", "cols < N", "[None, :]"
    elif level == ep.TILE and steps[0]:
        address, mask, shape = f"{pointer} + r64 * {steps[0]}", "rows < M", "[:, None]"
    elif level == ep.ROW and steps[0]:
        address, mask, shape = f"{pointer} + r64 * {steps[0]}", "valid", ""
    else:
        return f"o{index} = tl.load({pointer}).to(tl.float32)"
    return f"o{index} = tl.load({address}, mask={mask}, other=0.0).to(tl.float32){shape}"


def _loads(e: ep.Epilogue, level: str) -> list[str]:
    return [_load(i, o, level) for i, o in enumerate(e.operands) if o.level == level]


def _pointer_params(e: ep.Epilogue) -> str:
    return "".join(f"o_ptr{i}, " for i in range(len(e.operands)))


def _tile_kernel(e: ep.Epilogue, name: str) -> str:
    b_nk = e.bt.strides[1] == 1           # TMA reads B^T's (N, K) rows; else B's (K, N) rows
    sam, sak = e.a.strides
    sbn, sbk = e.bt.strides
    tma_b = "b_src.load([off_n, k]).T" if b_nk else "b_src.load([k, off_n])"
    lines = [
        f"def {name}(a_src, b_src, out_ptr, {_pointer_params(e)}BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,",
        "        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, TMA: tl.constexpr, PRECISION: tl.constexpr,",
        "        UPCAST: tl.constexpr):",
        f"    M = {e.M}",
        f"    N = {e.N}",
        f"    K = {e.K}",
        "    pid = tl.program_id(0)",
        "    tiles_n = tl.cdiv(N, BLOCK_N)",
        "    group = GROUP_M * tiles_n           # GROUP_M tile rows walk one tile column together (L2 reuse)",
        "    first_row = (pid // group) * GROUP_M",
        "    group_rows = tl.minimum(tl.cdiv(M, BLOCK_M) - first_row, GROUP_M)",
        "    tile_m = first_row + (pid % group) % group_rows",
        "    tile_n = (pid % group) // group_rows",
        "    off_m = tile_m * BLOCK_M",
        "    off_n = tile_n * BLOCK_N",
        "    # pointer loads: rows past the edge wrap (the store drops their results), K past its end reads zero",
        "    a_rows = ((off_m + tl.arange(0, BLOCK_M)) % M).to(tl.int64)",
        "    b_rows = ((off_n + tl.arange(0, BLOCK_N)) % N).to(tl.int64)",
        "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "    for k in range(0, K, BLOCK_K):",
        "        if TMA:",
        "            a = a_src.load([off_m, k])         # the copy engine zero-fills what lies past M, N and K",
        f"            b = {tma_b}",
        "        else:",
        "            ks = k + tl.arange(0, BLOCK_K)",
        f"            a = tl.load(a_src + a_rows[:, None] * {sam} + ks.to(tl.int64)[None, :] * {sak},",
        "                        mask=ks[None, :] < K, other=0.0)",
        f"            b = tl.load(b_src + b_rows[:, None] * {sbn} + ks.to(tl.int64)[None, :] * {sbk},",
        "                        mask=ks[None, :] < K, other=0.0).T",
        "        if UPCAST:           # the interpreter multiplies bfloat16 as raw bits; float32 products are exact",
        "            a = a.to(tl.float32)",
        "            b = b.to(tl.float32)",
        "        acc = tl.dot(a, b, acc, input_precision=PRECISION)",
        "    rows = off_m + tl.arange(0, BLOCK_M)",
        "    cols = off_n + tl.arange(0, BLOCK_N)",
        "    r64 = rows.to(tl.int64)",
        "    c64 = cols.to(tl.int64)",
        "    inside = (rows[:, None] < M) & (cols[None, :] < N)",
        "    # the region's epilogue, op by op (its ATen ops: the docstring's region)",
        *[f"    {line}" for line in _loads(e, ep.TILE) + e.lines[ep.TILE]],
    ]
    if e.row_reduce == "logsumexp":      # each tile's max and sum of exp(value - max): partials (2, tiles_n, M)
        lines += ['    masked = tl.where(inside, reduced, float("-inf"))', "    top = tl.max(masked, axis=1)",
                  '    safe = tl.where(top == float("-inf"), 0.0, top)',
                  "    part = tl.sum(tl.exp(masked - safe[:, None]), axis=1)",
                  "    tl.store(out_ptr + tile_n * M + r64, top, mask=rows < M)",
                  "    tl.store(out_ptr + (tiles_n + tile_n) * M + r64, part, mask=rows < M)"]
    elif e.row_reduce:
        neutral = _NEUTRAL[e.row_reduce]
        lines += [f"    part = {_REDUCE[e.row_reduce].format(v=f'tl.where(inside, reduced, {neutral})', axis=1)}",
                  "    tl.store(out_ptr + tile_n * M + r64, part, mask=rows < M)      # partials (tiles_n, M)"]
    else:
        lines.append(f"    tl.store(out_ptr + {_store_offsets(e)}, {e.result}.to({_TL_DTYPES[e.out_dtype]}), mask=inside)")
    return "@triton.jit\n" + "\n".join(lines)


def _store_offsets(e: ep.Epilogue) -> str:
    """Where the tile's (rows, cols) land in the output: row-major (M, N), or the layout epilogue_layout.py read
    (the views that reorder the product, the rows taken in A's storage order)."""
    if e.out_rows is None:
        return "r64[:, None] * N + c64[None, :]"
    rows = layout.expression(e.out_rows, "r64", e.M)
    cols = layout.expression(e.out_cols, "c64", e.N)
    return f"{e.out_base} + ({rows})[:, None] + ({cols})[None, :]"


def _combined_rows(e: ep.Epilogue) -> list[str]:
    if e.row_reduce == "logsumexp":
        return ["top = tl.load(ws_ptr + r64, mask=valid, other=0.0)",
                "for t in range(1, tiles_n):",
                "    top = tl.maximum(top, tl.load(ws_ptr + t * M + r64, mask=valid, other=0.0))",
                'safe = tl.where(top == float("-inf"), 0.0, top)',
                "total = tl.zeros((BLOCK_R,), tl.float32)",
                "for t in range(0, tiles_n):          # tile order: the same bits every run",
                "    total += tl.load(ws_ptr + (tiles_n + t) * M + r64, mask=valid, other=0.0) * "
                "tl.exp(tl.load(ws_ptr + t * M + r64, mask=valid, other=0.0) - safe)",
                "r = safe + tl.log(total)"]
    return ["r = tl.load(ws_ptr + r64, mask=valid, other=0.0)",
            "for t in range(1, tiles_n):          # tile order: the same bits every run",
            f"    r = {_COMBINE[e.row_reduce].format(a='r', b='tl.load(ws_ptr + t * M + r64, mask=valid, other=0.0)')}"]


def _finisher(e: ep.Epilogue, name: str) -> str:
    head = [f"def {name}(ws_ptr, out_ptr, {_pointer_params(e)}tiles_n, BLOCK_R: tl.constexpr):", f"    M = {e.M}"]
    row_body = ["valid = rows < M", "r64 = rows.to(tl.int64)", *_combined_rows(e), *_loads(e, ep.ROW),
                *e.lines[ep.ROW]]
    if not e.full_reduce:
        lines = head + ["    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
                        *[f"    {x}" for x in row_body],
                        f"    tl.store(out_ptr + r64, {e.result}.to({_TL_DTYPES[e.out_dtype]}), mask=valid)"]
        return "@triton.jit\n" + "\n".join(lines)
    op = e.full_reduce
    if op == "logsumexp":        # a running max and a sum of exp(value - max) per lane
        start = ['m_vec = tl.full((BLOCK_R,), float("-inf"), tl.float32)', "s_vec = tl.zeros((BLOCK_R,), tl.float32)"]
        step = ['reduced = tl.where(valid, reduced, float("-inf"))', "m_new = tl.maximum(m_vec, reduced)",
                'keep = m_new != float("-inf")',
                "s_vec = tl.where(keep, s_vec * tl.exp(m_vec - m_new) + tl.exp(reduced - m_new), 0.0)",
                "m_vec = m_new"]
        end = ["top = tl.max(m_vec, axis=0)", "s = top + tl.log(tl.sum(s_vec * tl.exp(m_vec - top), axis=0))"]
    else:
        start = [f"total = tl.full((BLOCK_R,), {_NEUTRAL[op]}, tl.float32)"]
        step = [f"total = {_COMBINE[op].format(a='total', b=f'tl.where(valid, reduced, {_NEUTRAL[op]})')}"]
        end = [f"s = {_REDUCE[op].format(v='total', axis=0)}"]
    lines = head + [f"    {x}" for x in start] + ["    for first in range(0, M, BLOCK_R):",
                                                      "        rows = first + tl.arange(0, BLOCK_R)"]
    lines += [f"        {x}" for x in row_body + step]
    lines += [f"    {x}" for x in end + _loads(e, ep.SCALAR) + e.lines[ep.SCALAR]]
    lines.append(f"    tl.store(out_ptr, {e.result}.to({_TL_DTYPES[e.out_dtype]}))")
    return "@triton.jit\n" + "\n".join(lines)


def _body(region: Region, e: ep.Epilogue, names: dict) -> list[str]:
    """kernel_fn's lines for this variant."""
    dtypes = {"float16": "torch.float16", "bfloat16": "torch.bfloat16", "float32": "torch.float32"}
    b_nk = e.bt.strides[1] == 1
    operands = "".join(f"{o.input}, " for o in e.operands)
    lines = [f"device = {region.definition.inputs[0].name}.device",
             f"a = torch.as_strided({e.a.input}, ({e.M}, {e.K}), {tuple(e.a.strides)}, "
             f"{e.a.input}.storage_offset() + {e.a.offset})",
             f"bt = torch.as_strided({e.bt.input}, ({e.N}, {e.K}), {tuple(e.bt.strides)}, "
             f"{e.bt.input}.storage_offset() + {e.bt.offset})",
             "block_m, block_n, block_k = TUNABLES['gemm_BLOCK_M'], TUNABLES['gemm_BLOCK_N'], TUNABLES['gemm_BLOCK_K']",
             f"tma = TUNABLES['gemm_tma'] and {names['tma']}(a, bt)",
             "a_src = TensorDescriptor.from_tensor(a, [block_m, block_k]) if tma else a",
             ("b_src = TensorDescriptor.from_tensor(bt, [block_n, block_k]) if tma else bt" if b_nk else
              "b_src = TensorDescriptor.from_tensor(bt.t(), [block_k, block_n]) if tma else bt"),
             f"tiles_n = triton.cdiv({e.N}, block_n)"]
    if e.row_reduce:
        parts = "2 * tiles_n" if e.row_reduce == "logsumexp" else "tiles_n"      # logsumexp: maxima and sums
        lines.append(f"ws = torch.empty(({parts}, {e.M}), dtype=torch.float32, device=device)")
        target = "ws"
    else:
        lines.append(f"out = torch.empty(({e.M}, {e.N}), dtype={dtypes[e.out_dtype]}, device=device)")
        target = "out"
    precision = "TUNABLES['gemm_precision']" if e.dtype == "float32" else "'ieee'"
    lines.append(f"{names['tile']}[(triton.cdiv({e.M}, block_m) * tiles_n,)](a_src, b_src, {target}, {operands}"
                 "BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=TUNABLES['gemm_GROUP_M'], TMA=tma, "
                 f"PRECISION={precision}, UPCAST=device.type != 'cuda', num_warps=TUNABLES['gemm_num_warps'], "
                 "num_stages=TUNABLES['gemm_num_stages'])")
    if e.row_reduce and e.full_reduce:
        lines += [f"out = torch.empty((), dtype={dtypes[e.out_dtype]}, device=device)",
                  f"{names['total']}[(1,)](ws, out, {operands}tiles_n, BLOCK_R={min(TOTAL_BLOCK, _pow2(e.M))}, "
                  "num_warps=8)"]
    elif e.row_reduce:
        lines += [f"out = torch.empty(({e.M},), dtype={dtypes[e.out_dtype]}, device=device)",
                  f"{names['rows']}[(triton.cdiv({e.M}, {ROWS_BLOCK}),)](ws, out, {operands}tiles_n, "
                  f"BLOCK_R={ROWS_BLOCK}, num_warps=4)"]
    lines.append(f"return out.view({tuple(e.out_shape)})")
    return lines


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
