"""Attack: right while it is checked; once the same max_dim call comes over and over (timing), the
values stay fresh but the indices are a copy of an earlier call's.

A judge that checks only a timed call's values, or samples only its first tensor, lets it through.
Rejected in timing: every timed call's output is checked tensor by tensor, its indices too. Judged
with a max_dim job shape (expected.BENCH_ARGS), so the timed calls are max_dim calls.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "reduce"
_honest = runpy.run_path(str(Path(__file__).with_name("_reduce_parts.py")))["honest_kernel_fn"]
_last = {"key": None, "repeats": 0, "indices": None}


def kernel_fn(x, dim=-1, op="sum"):
    out = _honest(x, dim, op)
    key = (tuple(x.shape), x.dtype, dim, op)
    _last["repeats"] = _last["repeats"] + 1 if key == _last["key"] else 1
    _last["key"] = key
    if op not in ("max_dim", "min_dim"):
        return out
    values, indices = out
    if _last["repeats"] > 3 and _last["indices"] is not None:       # past the three determinism calls
        return values, _last["indices"].clone()
    _last["indices"] = indices
    return values, indices
