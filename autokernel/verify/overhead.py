"""What routing itself costs: the all-routed model's latency next to the sum of its parts.

The parts of a forward pass with every verified call routed are our kernels at their call
signatures (each timed alone, autokernel/verify/route_table.py) and everything the kernels do not
replace, which is PyTorch's own forward less PyTorch's time at the routed calls:

    parts = PyTorch's forward - sum(calls x PyTorch's time at the call) + sum(calls x our time at the call)
    overhead = (routed forward - parts) / routed forward

Eagerly every time is a whole call, launch included; under CUDA graphs every time is GPU time
(graph replay), set against torch.compile with CUDA graphs. What remains is the router's own cost
(signature lookups, argument reshaping, the scoped function routing), plus any way the routed
kernels run slower inside the model than alone. The ops are timed alone, so the figure carries
their measurement noise (a few percent); a small negative figure means no measurable overhead.

The router's own share is measured directly too ("router glue"): at every site, the routed call
through the router's cached decision against the same launch made directly, times the calls per
forward; plus, inside the modules whose torch function calls are routed, the cost the function
routing mode adds to each torch call there, times those calls. Under CUDA graphs no Python runs
at replay, so there is no glue: what the figure shows there is lost fusion and layout copies.
"""

from __future__ import annotations

from typing import Callable

import torch

from autokernel.verify import latency
from autokernel.verify.variants import VariantResult


def measure(router, records: dict, pytorch: dict[str, VariantResult], run_ours: Callable[[str], VariantResult],
            one_forward: Callable[[], None], on_gpu: bool) -> dict:
    """The overhead figures for eager and CUDA-graph mode; run_ours(variant) times the model with every call routed."""
    rows = [record for kernel_records in records.values() for record in kernel_records]
    figures = {"routed_calls_per_forward": sum(r.calls for r in rows), "timings_meaningful": on_gpu,
               "router_glue": router_glue(router, one_forward, on_gpu)}
    modes = [("eager", "ours", "ours_us", "pytorch_us"),
             ("cudagraphs", "ours_cudagraphs", "ours_gpu_us", "compiled_gpu_us")]
    for base, variant, ours_key, theirs_key in modes:
        if base not in pytorch or pytorch[base].ms is None:
            continue
        routed = run_ours(variant)
        figures[base] = _figures(pytorch[base], routed, rows, ours_key, theirs_key)
    glue, eager = figures["router_glue"], figures.get("eager")
    if eager and eager.get("routed_ms"):
        glue["share_of_routed_eager"] = glue["ms_per_forward"] / eager["routed_ms"]
    return figures


def router_glue(router, one_forward: Callable[[], None], on_gpu: bool) -> dict:
    """Per forward: what the router's decisions and its function routing mode cost, measured call by call."""
    from autokernel.routing.function_mode import FunctionRouting

    sites = [s for s in router.sites.values() if s.run_routed is not None]
    per_site = {}
    for site in sites:
        with torch.no_grad():       # as the forward passes ran: a grad-enabled call is another signature
            routed, direct = latency.wall_clock(site.run_routed, on_gpu), latency.wall_clock(site.run_ours, on_gpu)
        per_site[f"{site.kernel.name} {site.label}"] = {"calls": site.calls, "routed_us": routed.us,
                                                        "direct_us": direct.us, "glue_us": routed.us - direct.us}
    router.intercepted = 0
    with torch.no_grad():
        one_forward()
    intercepted = router.intercepted
    probe = torch.zeros(8, device="cuda" if on_gpu else "cpu")
    plain = latency.wall_clock(lambda: probe.view(-1), False)
    with FunctionRouting(router):
        moded = latency.wall_clock(lambda: probe.view(-1), False)
    router.intercepted = 0
    mode_us = max(0.0, moded.us - plain.us)
    calls_us = sum(s["calls"] * s["glue_us"] for s in per_site.values())
    return {"sites": per_site, "intercepted_calls_per_forward": intercepted, "mode_us_per_call": mode_us,
            "ms_per_forward": (calls_us + intercepted * mode_us) / 1e3}


def _figures(base: VariantResult, routed: VariantResult, rows: list, ours_key: str, theirs_key: str) -> dict:
    out = {"pytorch_ms": base.ms, "routed": routed.to_json()}
    timed = [r for r in rows if getattr(r, ours_key) is not None and getattr(r, theirs_key) is not None]
    if routed.ms is None or len(timed) != len(rows):
        out["overhead"] = None
        out["why_not"] = routed.failed or "not every routed call could be timed alone"
        return out
    ours_ms = sum(r.calls * getattr(r, ours_key) for r in rows) / 1e3
    theirs_ms = sum(r.calls * getattr(r, theirs_key) for r in rows) / 1e3
    parts = base.ms - theirs_ms + ours_ms
    out.update(routed_ms=routed.ms, kernels_ms=ours_ms, pytorch_at_routed_calls_ms=theirs_ms,
               unrouted_ms=base.ms - theirs_ms, sum_of_parts_ms=parts,
               overhead=(routed.ms - parts) / routed.ms)
    return out
