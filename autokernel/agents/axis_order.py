"""The order in which the built-in search walks a kernel's tunables: first where the time goes.

Each tunable is classified by its name, by the first pattern of AXIS_KINDS its whole name matches
(case-insensitively); a name no pattern matches is "other". When the judge's summary of the
latest passing result (bench.py's `limits`, autokernel/judge/limits.py) says the kernel is memory-bound
at the shape where most of its time goes, the kinds that change how memory is moved come first;
when it is compute-bound, the pipeline depth and the warps come first, then the tiles (see KIND_ORDER). Within
a kind, and without a bound (no passing result yet, or the CPU interpreter, which has none) after the whole
plans, the order is the kernel's declaration order.

Whole plans (kind "plan") come first, for either bound and without one: a GEMM starter's (the GEMM engine's
tile-and-pipeline plans, "gate_up" and warp specialization), each of which moves tiles, warps and stages together
to a plan that fits the GPU, where a single tile side moved alone fell off a cliff (spills, shared memory) on an
H100; and a region starter's `variant`, its ways of running the whole region (Inductor's code, Inductor's other
ways with a reduction, the GEMM engine with the region's epilogue), whose knobs only matter once the way is
chosen. A 3-minute loop on gemm_relu_rowmax (float32, H200, session 25) started from Inductor's code untuned
(5.2 ms: a quarter of 3 minutes pays for no autotuned starter, autotune_budget.py, and an untuned starter's
variants are not judged) and turned its stages for the whole budget; the engine variant runs the region in 0.4 ms.

A kernel whose tunables come in shape buckets (kernels/matmul.py: large_BLOCK_M, mid_BLOCK_M,
small_BLOCK_M...) and whose starter plans each shape (its public `plan(...)` returns an object
with a `.bucket`) gets the buckets the job's shapes use walked first, and the other buckets'
tunables last: changing those changes nothing the judge times. A starter may map each bucket to the
tunables its plans read in a PLAN_BUCKETS literal (kernels/matmul.py: "engine" reads engine_*, the
pointer tiles' buckets their own and the split-K settings); without one, buckets are the families
of name prefixes that carry the same parameters (large_, mid_, small_ each with BLOCK_M ... stages). The plan is the repository's
starter's (kernels/<type>.py, which a candidate cannot change), made for the job's shapes and
dtype with the current TUNABLES, on the CPU, where the starter plans as on an H100.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re

from autokernel.core.contracts import BenchResult
from autokernel.core.dtypes import DTYPES
from autokernel.core.kernel_file import import_file
from autokernel.core.paths import starter_path

log = logging.getLogger(__name__)

# (kind, pattern): the first pattern a tunable's whole name matches gives its kind.
AXIS_KINDS: list[tuple[str, str]] = [
    ("plan", r"\w*PLAN|GATE_UP|\w*WARP_SPECIALIZE|VARIANT"),               # whole plans: the GEMM engine's, a region's way
    ("vectorisation", r".*(ELEMS_PER_THREAD|VEC\w*)"),                     # elements per thread per access
    ("contiguous block", r"MAX_BLOCK_\w+|\w*BLOCK_(V|R|INNER|D|W)|\w*TILE_ELEMS|\w*MEAN_BLOCK|EPILOGUE_BLOCK_\w+"),
    ("warps", r"\w*WARPS"),                                                 # num_warps, MAX_NUM_WARPS, large_warps
    ("tile", r"\w*BLOCK_[MNKH]"),                                           # BLOCK_M, large_BLOCK_N, dw_BLOCK_H
    ("stages", r"\w*STAGES"),                                               # software pipelining depth
    ("split-K", r"\w*SPLIT_K\w*"),
    ("swizzle", r"\w*GROUP_M"),                                             # the order tiles run in (L2 reuse)
]
# Which kinds come first for each roofline bound; "other" (thresholds, precision switches) comes last.
# Compute-bound: the pipeline depth and the warps first, the tile sides after them. Measured on an
# H100 at the LLaMA 4x1024's shapes (benchmarks/results/2026-11-23_NVIDIA-H100_norm_pass/ and
# _screen_and_headroom/): the wins were 4 stages (2.09x, 1.04x) and 4 warps (1.28x), while every
# one-sided tile move fell off a cliff (0.13-0.94x: spills, shared memory), so five of them in a
# row ended the job before the stages were ever tried.
KIND_ORDER = {
    "memory": ["plan", "contiguous block", "warps", "vectorisation", "tile", "stages", "split-K", "swizzle", "other"],
    "compute": ["plan", "stages", "warps", "swizzle", "tile", "split-K", "contiguous block", "vectorisation", "other"],
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


def bound_of(results: list[BenchResult | None]) -> str | None:
    """The roofline bound in the judge's summary of the first passing result that has one."""
    for result in results:
        if result is not None and result.passed:
            bound = (result.limits or {}).get("bound")
            if bound in KIND_ORDER:
                return bound
    return None


def axis_order(names: list[str], bound: str | None, used_buckets: list[str] | None = None,
               declared_buckets: dict[str, list[str]] | None = None) -> list[str]:
    """The tunables in the order to walk them: by kind for the bound, other buckets' tunables last."""
    idle = set(idle_bucket_axes(names, used_buckets or [], declared_buckets))
    order = KIND_ORDER[bound] if bound else ["plan"]
    ranks = {kind: i for i, kind in enumerate(order)}
    return sorted(names, key=lambda name: (name in idle, ranks.get(kind_of(name), len(order)), names.index(name)))


def bucket_families(names: list[str]) -> list[list[str]]:
    """Prefixes that carry the same parameters, two or more to a family (matmul's large_, mid_, small_, ieee_
    and tc32_ each have BLOCK_M, BLOCK_N, BLOCK_K, warps and stages); a name's prefix ends at its first "_"."""
    params: dict[str, set[str]] = {}
    for name in names:
        if "_" in name:
            prefix, param = name.split("_", 1)
            params.setdefault(prefix, set()).add(param)
    families: dict[frozenset, list[str]] = {}
    for prefix, carried in params.items():
        if len(carried) >= 2:
            families.setdefault(frozenset(carried), []).append(prefix)
    return [prefixes for prefixes in families.values() if len(prefixes) >= 2]


def idle_bucket_axes(names: list[str], used_buckets: list[str],
                     declared_buckets: dict[str, list[str]] | None = None) -> list[str]:
    """The tunables only the buckets the job does not use read. declared_buckets maps a bucket to the name
    prefixes (or whole names) of the tunables its plans read; without it each prefix of a family is a bucket
    that reads the tunables it starts."""
    if not used_buckets:
        return []
    buckets = declared_buckets or {prefix: [prefix + "_"] for family in bucket_families(names) for prefix in family}

    def read_by(bucket: str, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in buckets.get(bucket, []))
    return [name for name in names if any(read_by(b, name) for b in buckets)
            and not any(read_by(b, name) for b in used_buckets)]


def declared_buckets(kernel_type: str) -> dict[str, list[str]] | None:
    """The PLAN_BUCKETS literal (bucket -> the tunables' name prefixes its plans read) of the repository's
    starter of this type, or None where it has none."""
    starter = starter_path(kernel_type)
    if not starter.is_file():
        return None
    for node in ast.parse(starter.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PLAN_BUCKETS" for t in node.targets):
            try:
                return {str(bucket): [str(p) for p in prefixes] for bucket, prefixes in ast.literal_eval(node.value).items()}
            except (ValueError, AttributeError):
                return None
    return None


def buckets_used(kernel_type: str, tunables: dict, shapes: list[dict], dtype_name: str | None) -> list[str] | None:
    """The shape buckets the starter's plan picks for the job's shapes with these TUNABLES, or None where
    the starter does not plan by bucket (or the plan cannot be made: then there is no preference)."""
    plans = starter_plans(kernel_type, [tunables], shapes, dtype_name, "no shape-bucket preference")
    if plans is None or not all(hasattr(plan, "bucket") for plan in plans[0]):
        return None             # planned per shape without buckets (the GEMM engine's starters)
    return sorted({plan.bucket for plan in plans[0]})


def starter_plans(kernel_type: str, configs: list[dict], shapes: list[dict], dtype_name: str | None,
                  purpose: str) -> list[list] | None:
    """For each TUNABLES config, what the starter's public `plan(...)` makes for each of the job's shapes (on
    the CPU, where the starter plans as on an H100); None where the starter has no plan or cannot make one
    (logged with `purpose`: what goes without)."""
    starter = starter_path(kernel_type)
    if not shapes or not starter.is_file() or "def plan(" not in starter.read_text():
        return None
    import torch

    try:
        module = import_file(starter, f"_autokernel_starter_{kernel_type}")
        params = [name for name, p in inspect.signature(module.plan).parameters.items()      # the shape's sizes
                  if name not in ("dtype", "device") and p.default is inspect.Parameter.empty]
        dtype = DTYPES[dtype_name or "float16"]
        made = []
        for config in configs:
            module.TUNABLES = dict(config)
            made.append([module.plan(*(shape[p] for p in params), dtype=dtype, device=torch.device("cpu"))
                         for shape in shapes])
        return made
    except Exception as exc:    # a hint for the search, never a reason to stop the run
        log.warning("%s for %s: %s: %s", purpose, kernel_type, type(exc).__name__, exc)
        return None
