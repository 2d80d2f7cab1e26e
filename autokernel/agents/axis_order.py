"""The order in which the built-in search walks a kernel's tunables: first where the time goes.

Each tunable is classified by its name, by the first pattern of AXIS_KINDS its whole name matches
(case-insensitively); a name no pattern matches is "other". When the judge's summary of the
latest passing result (bench.py's `limits`, autokernel/limits.py) says the kernel is memory-bound
at the shape where most of its time goes, the kinds that change how memory is moved come first;
when it is compute-bound, the pipeline depth and the warps come first, then the tiles (see KIND_ORDER). Within
a kind, and without a bound (no passing result yet, or the CPU interpreter, which has none), the
order is the kernel's declaration order.

A kernel whose tunables come in shape buckets (kernels/matmul.py: large_BLOCK_M, mid_BLOCK_M,
small_BLOCK_M...) and whose starter plans each shape (its public `plan(...)` returns an object
with a `.bucket`) gets the buckets the job's shapes use walked first, and the other buckets'
tunables last: changing those changes nothing the judge times. The plan is the repository's
starter's (kernels/<type>.py, which a candidate cannot change), made for the job's shapes and
dtype with the current TUNABLES, on the CPU, where the starter plans as on an H100.
"""

from __future__ import annotations

import inspect
import logging
import re

from autokernel.contracts import PASS
from autokernel.dtypes import DTYPES
from autokernel.kernel_file import import_file
from autokernel.paths import starter_path

log = logging.getLogger(__name__)

# (kind, pattern): the first pattern a tunable's whole name matches gives its kind.
AXIS_KINDS: list[tuple[str, str]] = [
    ("vectorisation", r".*(ELEMS_PER_THREAD|VEC\w*)"),                     # elements per thread per access
    ("contiguous block", r"MAX_BLOCK_\w+|\w*BLOCK_(V|R|INNER|D)|\w*TILE_ELEMS|\w*MEAN_BLOCK|EPILOGUE_BLOCK_\w+"),
    ("warps", r"\w*WARPS"),                                                 # num_warps, MAX_NUM_WARPS, large_warps
    ("tile", r"\w*BLOCK_[MNK]"),                                            # BLOCK_M, large_BLOCK_N, SMALL_BLOCK_K
    ("stages", r"\w*STAGES"),                                               # software pipelining depth
    ("split-K", r"SPLIT_K\w*"),
    ("swizzle", r"\w*GROUP_M"),                                             # the order tiles run in (L2 reuse)
]
# Which kinds come first for each roofline bound; "other" (thresholds, precision switches) comes last.
# Compute-bound: the pipeline depth and the warps first, the tile sides after them. Measured on an
# H100 at the LLaMA 4x1024's shapes (benchmarks/results/2026-11-23_NVIDIA-H100_norm_pass/ and
# _screen_and_headroom/): the wins were 4 stages (2.09x, 1.04x) and 4 warps (1.28x), while every
# one-sided tile move fell off a cliff (0.13-0.94x: spills, shared memory), so five of them in a
# row ended the job before the stages were ever tried.
KIND_ORDER = {
    "memory": ["contiguous block", "warps", "vectorisation", "tile", "stages", "split-K", "swizzle", "other"],
    "compute": ["stages", "warps", "swizzle", "tile", "split-K", "contiguous block", "vectorisation", "other"],
}


def kind_of(name: str) -> str:
    for kind, pattern in AXIS_KINDS:
        if re.fullmatch(pattern, name, flags=re.IGNORECASE):
            return kind
    return "other"


def paired_warps(name: str, names: list[str]) -> str | None:
    """The warps tunable of a tile side's bucket (large_BLOCK_N -> large_warps, BLOCK_N -> num_warps,
    SMALL_BLOCK_N -> small_num_warps), or None. A wider tile holds more accumulators per thread, so
    it often spills unless more warps share it: the search tries the two together too."""
    if kind_of(name) != "tile":
        return None
    prefix = name[:name.upper().index("BLOCK_")].lower()
    warps = [other for other in names if kind_of(other) == "warps" and other.lower().startswith(prefix)
             and kind_of(other[len(prefix):]) == "warps" and "max" not in other.lower()]
    # With no bucket prefix, only a warps tunable that has none either (num_warps, not small_num_warps).
    warps = [other for other in warps if prefix or other.lower() in ("num_warps", "warps")]
    return warps[0] if len(warps) == 1 else None


def bound_of(results: list[dict | None]) -> str | None:
    """The roofline bound in the judge's summary of the first passing result that has one."""
    for result in results:
        if result and result.get("correctness") == PASS:
            bound = (result.get("limits") or {}).get("bound")
            if bound in KIND_ORDER:
                return bound
    return None


def axis_order(names: list[str], bound: str | None, used_buckets: list[str] | None = None) -> list[str]:
    """The tunables in the order to walk them: by kind for the bound, other buckets' tunables last."""
    idle = set(idle_bucket_axes(names, used_buckets or []))
    ranks = {kind: i for i, kind in enumerate(KIND_ORDER[bound])} if bound else {}
    return sorted(names, key=lambda name: (name in idle, ranks.get(kind_of(name), 0), names.index(name)))


def idle_bucket_axes(names: list[str], used_buckets: list[str]) -> list[str]:
    """The tunables of buckets the job does not use. A bucket's siblings are the prefixes that carry
    every parameter a used bucket carries (large_ and mid_ both have BLOCK_M, BLOCK_N, ..., warps)."""
    idle: list[str] = []
    for used in used_buckets:
        params = [name[len(used) + 1:] for name in names if name.startswith(used + "_")]
        if not params:
            continue
        siblings = {name[:-len(params[0]) - 1] for name in names if name.endswith("_" + params[0])}
        for prefix in sorted(siblings - set(used_buckets)):
            axes = [f"{prefix}_{param}" for param in params]
            if all(axis in names for axis in axes):
                idle += [axis for axis in axes if axis not in idle]
    return idle


def buckets_used(kernel_type: str, tunables: dict, shapes: list[dict], dtype_name: str | None) -> list[str] | None:
    """The shape buckets the starter's plan picks for the job's shapes with these TUNABLES, or None where
    the starter does not plan by bucket (or the plan cannot be made: then there is no preference)."""
    starter = starter_path(kernel_type)
    if not shapes or not starter.is_file() or "def plan(" not in starter.read_text():
        return None
    import torch

    try:
        module = import_file(starter, f"_autokernel_starter_{kernel_type}")
        module.TUNABLES = dict(tunables)
        params = [p for p in inspect.signature(module.plan).parameters if p not in ("dtype", "device")]
        dtype = DTYPES[dtype_name or "float16"]
        return sorted({module.plan(*(shape[p] for p in params), dtype=dtype, device=torch.device("cpu")).bucket
                       for shape in shapes})
    except Exception as exc:    # a hint for the search order, never a reason to stop the run
        log.warning("no shape-bucket preference for %s: %s: %s", kernel_type, type(exc).__name__, exc)
        return None
