"""The end-to-end comparison: the model as PyTorch runs it and with our kernels, in every mode a user would choose.

One process, one model, the same inputs. The variants are PyTorch eager, torch.compile and
torch.compile with CUDA graphs (mode="reduce-overhead"), and each of the three with our kernels
plugged in. Each is timed as a whole forward call (autokernel/verify/latency.py: median of repeats and
their spread) and its output checked against the original's. The steps:
  1. time PyTorch's three variants;
  2. plug every verified kernel in ("all" policy) and run once: the output must match (the
     correctness check), and every call signature the kernels meet is noted;
  3. time our kernel against PyTorch's op at each signature (autokernel/verify/route_table.py);
  4. keep, mode by mode, only the winners that make the whole model faster (autokernel/verify/selection.py),
     and time our three variants with them ("measured" policy; "all" skips 3 and 4 and routes all); the
     model's batch norms folded into the layers before them, and its linears that read one input run as one
     GEMM, are more candidates there (autokernel/verify/rewrites.py);
  5. name PyTorch's best and AutoKernel's best, time the two in turn (autokernel/verify/head_to_head.py), and say
     which one to use.
With `overhead`, step 2's all-routed model is also timed eagerly and under CUDA graphs and set
against the sum of its parts (overhead.py). Without a GPU, compile and CUDA-graph variants that
cannot run are skipped, and every figure is labelled not meaningful.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from autokernel.routing.decisions import ALL, MEASURED
from autokernel.routing.outputs import detached_copy, output_error, tf32_convolution_error, tolerance
from autokernel.routing.plugin import router_of
from autokernel.routing.router import Router
from autokernel.verify import deadline, head_to_head, headroom, rewrites, route_table, selection, variants
from autokernel.verify.containment import (CHECK, COUNTS, HEAD_TO_HEAD, HEADROOM, LOAD, OVERHEAD, REWRITE, SELECTION,
                                           Drops)
from autokernel.verify.report_record import Verdict
from autokernel.verify.variants import HOW_TO_USE, INDUCTOR, NOISE_FLOOR, VARIANTS, VariantResult


def choose(results: dict[str, VariantResult], allowed_error: float, on_gpu: bool, routed: bool,
           in_turn: dict[str, tuple[float, float] | None] | None = None,
           pair: head_to_head.HeadToHead | None = None, unchecked: int = 0) -> Verdict:
    """PyTorch's best, AutoKernel's best among the variants that are correct, and which of the two to use.

    pair: the two bests timed in turn (head_to_head.py): where it is of these two variants, its speedup and the
    noise of its pairs are the verdict's, and its times the ones the summary names. Without it, in_turn: ours
    variant -> (speedup, noise) of its routes over PyTorch's own path in the same mode, timed in turn by the
    selection. PyTorch's best was timed minutes before ours, and a GPU shared with other work (the gate's 8
    verifies on one GPU, session 18: LLaMA's compile + CUDA graphs 1.17-1.63 ms from repeat to repeat) can make it
    look slower than it is: the shipped LLaMA measured 1.41x so, 1.08x in turn. Where both exist, the verdict
    takes the smaller speedup, so it never claims more than either says, against the noise of the pairs.

    unchecked: kernels whose checks verify's time limit left out (selection.unchecked); the summary says so, where
    "no kernel made this model faster" would not be true (session 29's gate: 10 models had no time for any check)."""
    def brief(result: VariantResult | None) -> dict | None:     # the times apart: score's baselines are too
        return None if result is None else {"variant": result.variant, "name": VARIANTS[result.variant][0],
                                            "ms": result.ms}

    theirs, ours = variants.bests(results, allowed_error, like_with_like=pair is not None)
    if pair is not None and not (ours and pair.ours == ours.variant and pair.theirs == theirs.variant):
        pair, (theirs, ours) = None, variants.bests(results, allowed_error)
    speedup = theirs.ms / ours.ms if theirs and ours else None
    if theirs is None:
        return Verdict(_unmeasured(results.get("eager"), allowed_error), None, brief(ours), None, "eager", "model",
                       False, on_gpu, False)
    noise = max(NOISE_FLOOR, theirs.latency.spread, ours.latency.spread) if ours else NOISE_FLOOR
    paired = (in_turn or {}).get(ours.variant) if ours and pair is None else None
    capped = paired is not None and paired[0] < speedup
    if pair is not None:
        speedup, noise = pair.speedup, max(NOISE_FLOOR, pair.noise)
    elif paired is not None:
        # The pairs' noise, not the spread of figures timed apart on a machine that drifts between them (the
        # gate's HF LLaMA 1x1024: 1.10x apart with 16% spread, 1.10x in turn with 3%)
        speedup, noise = min(speedup, paired[0]), max(NOISE_FLOOR, paired[1])
    faster = bool(on_gpu and ours is not None and speedup > 1 + noise)
    name = VARIANTS[theirs.variant][0]
    if not on_gpu:
        summary = f"no speed verdict: CPU interpreter timings are not meaningful; use {name}"
    elif faster:
        ours_ms, theirs_ms = (pair.ours_ms, pair.theirs_ms) if pair else (ours.ms, theirs.ms)
        summary = (f"faster by {speedup:.2f}x: {VARIANTS[ours.variant][0]} ({ours_ms:.3f} ms) against "
                   f"PyTorch's best, {name} ({theirs_ms:.3f} ms)" + (_in_turn_note(pair) if pair else "")
                   + ("; the speedup is the one timed in turn with PyTorch's own path, smaller than these two "
                      "figures' ratio" if capped else ""))
    elif not routed and unchecked:
        summary = (f"no gain: use {name} ({theirs.ms:.3f} ms); nothing routed: the end-to-end checks of "
                   f"{unchecked} kernel(s) did not fit in verify's time limit (a longer --time-limit may find a gain)")
    elif not routed:
        summary = (f"no gain: use {name} ({theirs.ms:.3f} ms); no kernel made this model faster at its own "
                   "call shapes")
    else:
        summary = (f"no gain: use {name} ({theirs.ms:.3f} ms); AutoKernel's best, "
                   f"{VARIANTS[ours.variant][0] if ours else 'none'}, is {speedup or 0:.2f}x of it (noise {noise:.0%})")
    if unchecked and routed and on_gpu:
        summary += f"; the end-to-end checks of {unchecked} more kernel(s) did not fit in verify's time limit"
    use = ours.variant if faster else theirs.variant
    return Verdict(summary, brief(theirs), brief(ours), speedup, use, HOW_TO_USE[use], faster, on_gpu, False,
                   head_to_head=pair.to_json() if pair else None, unchecked_routes=unchecked)


def _in_turn_note(pair: head_to_head.HeadToHead) -> str:
    gpu = f" ({pair.gpu_speedup:.2f}x on the GPU's own clock)" if pair.gpu_speedup is not None else ""
    return f"; the two timed in turn{gpu}"


def _unmeasured(eager: VariantResult | None, allowed_error: float) -> str:
    """Why PyTorch's own variants have no figure. The model run again as it is, off from its first output: the model
    does not give the same output twice (random numbers in its forward, or inputs it changes in place), so no
    output of any variant can be checked (a VAE's sampling took every kernel and torch.compile with it)."""
    if eager is not None and eager.ms is not None and eager.error is not None and not eager.error <= allowed_error:
        return (f"PyTorch's own variants could not be checked: the model run again as it is is off by "
                f"{eager.error:.3g} (tolerance {allowed_error:.3g}), so its output changes from call to call (random "
                "numbers in its forward, or inputs it changes in place) and no variant's output can be compared")
    return "PyTorch's own variants could not be measured"


def compare(model, inputs: tuple, plug_in: Callable | None, *, on_gpu: bool, compile_backend: str | None = INDUCTOR,
            policy: str = MEASURED, overhead: bool = False, log: Callable[[str], None] = lambda line: None,
            drops: Drops | None = None, max_autotune: bool = False) -> dict:
    """Steps 1 to 5 above, as plain data; plug_in(policy, keep_examples, exclude, on_failure) plugs the kernels into
    `model` (None: there are none, and PyTorch's own paths are compared alone).

    compile_backend None skips the compiled variants; another backend than inductor has no CUDA-graph variant.
    A failure in our part drops its unit into `drops` (containment.py) and the comparison goes on: a kernel that
    fails to load or breaks the model's forward is left out and the rest are checked again; a figure that cannot be
    taken is left out; with no kernel left, the verdict is PyTorch's best.
    """
    drops = drops if drops is not None else Drops(log)
    names = variants.available(on_gpu, compile_backend, max_autotune)
    backend = compile_backend or INDUCTOR
    results: dict[str, VariantResult] = {}
    profiled: dict = {}          # torch.compile's forward, profiled where it was built and timed (_headroom)
    with torch.no_grad():
        expected = detached_copy(model(*inputs))
        allowed = tolerance(expected, tf32_convolution_error(model, inputs, expected))
        for variant in (v for v in names if not VARIANTS[v][1]):
            log(f"timing {VARIANTS[variant][0]}")
            results[variant] = variants.run(variant, model, inputs, expected, on_gpu, backend, after_timing=(
                _profiler_of(profiled, log) if variant == "compile" and on_gpu and compile_backend == INDUCTOR
                else None))
    # After the checks, our variants are built and timed as PyTorch's were, and the two bests timed in turn (each
    # call about as long as PyTorch's best, as a first guess).
    theirs_best = variants.bests(results, allowed)[0]
    deadline.reserve(1.25 * sum(result.seconds or 0.0 for result in results.values()) + 10
                     + head_to_head.seconds_needed(theirs_best.ms if theirs_best else 0.0, on_gpu))
    found = drops.contained(HEADROOM, "torch.compile's forward", lambda: _headroom(results, profiled))
    ours, applied = None, []
    if plug_in is not None:
        # Rewritten before the kernels are plugged in, undone after they are taken out (handover.compare): patches
        # come off in the order opposite to the one they went on in.
        for kind in rewrites.KINDS:
            made = drops.contained(REWRITE, kind.name, lambda kind=kind: rewrites.rewrite(
                kind, model, inputs, policy, on_gpu))
            applied += [made] if made is not None else []
        ours = _ours_contained(model, inputs, plug_in, names, backend, results, expected, allowed, on_gpu=on_gpu,
                               policy=policy, overhead=overhead, log=log, drops=drops, applied=applied)
    if ours is None:          # no kernel of ours ran: PyTorch's best, still with a verdict
        ours = _nothing_of_ours(names, results, policy)
    routed_any = ours.pop("routed_any")
    verdict = choose(results, allowed, on_gpu, routed_any, ours.pop("in_turn", {}), ours.pop("head_to_head", None),
                     selection.unchecked(ours.get("selection", [])))
    if ours.pop("regions") and verdict.use in variants.HOW_TO_USE_WITH_REGIONS:
        verdict.use_code = variants.HOW_TO_USE_WITH_REGIONS[verdict.use]
    if VARIANTS[verdict.use][1]:
        compiled = VARIANTS[verdict.use][2] is not None
        verdict.use_code = rewrites.use_code(verdict.use_code, applied, compiled)
        for rewrite in applied:
            setattr(verdict, rewrite.kind.report_key, rewrite.on_in(compiled))
    checked_error = ours.pop("checked_error")
    return {"variants": {name: result.to_json() for name, result in results.items()},
            "verdict": verdict.to_json(), "tolerance": allowed,
            "checked": {"policy": ALL, "max_error": checked_error, "passed": checked_error <= allowed,
                        **ours.pop("checked")},
            "headroom": found.to_json() if found else None, "dropped": drops.to_json(), **ours}


class OverTolerance(Exception):
    """The model routed through our kernels computes something else than the model: beyond its output's tolerance.
    Raised like a broken forward, so the kernels that do it are found and dropped the same way."""


def _ours_contained(model, inputs, plug_in, names, backend, results, expected, allowed, *, on_gpu, policy, overhead,
                    log, drops: Drops, applied: list[rewrites.Rewrite] = ()) -> dict | None:
    """Our part of the comparison (_ours) with every kernel that loads; when it raises (a broken forward, or the
    check over the tolerance: OverTolerance), each kernel is tried alone, those that fail alone are dropped, and the
    rest go again (all of them, when none fails alone: the failure is their sum). None when no kernel is left."""
    excluded: set[str] = set()

    def not_loaded(name: str, exc: Exception) -> None:
        excluded.add(name)
        drops.add(LOAD, name, exc)
    while True:
        try:
            router = plug_in(policy=ALL, keep_examples=True, exclude=excluded, on_failure=not_loaded)
            if not router.kernels:
                return None
            return _ours(model, inputs, router, names, backend, results, expected, allowed, on_gpu=on_gpu,
                         policy=policy, overhead=overhead, log=log, drops=drops, applied=applied)
        except Exception as exc:     # the routed model's forward, or a step on it, broke: find the kernels that did it
            for rewrite in applied:
                rewrite.off()        # the kernels are tried alone as the check runs them: not rewritten
            for variant in (v for v in names if VARIANTS[v][1]):
                results.pop(variant, None)
            plugged = router_of(model)
            suspects = [kernel.name for kernel in plugged.kernels] if plugged else []
            culprits = {name: why for name in suspects
                        if (why := _fails_alone(model, inputs, plug_in, name, suspects, expected, allowed))
                        is not None}
            for name in culprits or suspects:
                excluded.add(name)
                drops.add(CHECK, name, culprits.get(name) or exc)
            if not suspects:
                drops.add(CHECK, "every kernel", exc)
                return None


def _fails_alone(model, inputs, plug_in, name: str, all_names: list[str], expected,
                 allowed: float) -> BaseException | None:
    """Why the model's routed forward fails with only this kernel plugged in: it raises, or its output is over the
    tolerance (None when it runs and passes)."""
    try:
        router = plug_in(policy=ALL, keep_examples=False, exclude=set(all_names) - {name}, on_failure=None)
        resolve_routes(router, model, inputs)
        with torch.no_grad():
            error = output_error(expected, model(*inputs))
    except Exception as exc:        # this kernel's route is what breaks the forward
        return exc
    if not error <= allowed:
        return OverTolerance(f"with it alone routed, the model's output is off by {error:.3g}, over the tolerance "
                             f"{allowed:.3g}")
    return None


def _nothing_of_ours(names: list[str], results: dict[str, VariantResult], policy: str) -> dict:
    for variant in (v for v in names if VARIANTS[v][1]):
        results[variant] = VariantResult(variant, failed="no kernel of ours ran (see the parts dropped)")
    return {"routed_any": False, "regions": False, "checked_error": 0.0,     # no kernel: every section empty
            "checked": Router([], policy=ALL).summary(), "routing": Router([], policy=policy).summary(),
            "route_table": [], "selection": [], "records": {}}


def _ours(model, inputs, router, names, backend, results, expected, allowed, *, on_gpu, policy, overhead, log,
          drops: Drops, applied: list[rewrites.Rewrite] = ()) -> dict:
    """Steps 2 to 4 with the kernels plugged into the model (router): the check, the route table, the selection,
    and our variants timed; a figure that raises is dropped (a variant's own failure is in its result). The
    rewrites are off until the selection (or, without one, their records' flags) turns them on."""
    for rewrite in applied:
        rewrite.off()
        rewrite.applied.bypassed = lambda: router.bypass      # PyTorch's own path, timed in turn, runs as it is
        rewrite.applied.eager_trace = lambda: router.regions is not None and router.regions.tracing_eagerly
    with torch.no_grad():
        if router.folding is not None or router.regions is not None:
            # The first call with these inputs is watched for folded norms (run unfolded), and the first
            # calls resolve the routes eagerly before regions are rewritten in the graph; the check and the
            # route table need both, as every later call runs them.
            resolve_routes(router, model, inputs)
            router.reset_stats()
        try:
            checked_error = output_error(expected, model(*inputs))
        except torch.OutOfMemoryError:       # said, not crashed: the check could not run, so it does not pass
            checked_error = math.inf
            log("the check with every kernel routed ran out of GPU memory: it does not pass")
            torch.cuda.empty_cache()
        if policy == MEASURED and checked_error != math.inf and not checked_error <= allowed:
            # A kernel the judge passed can still be off in the model (errors that add up over its layers, inputs
            # the judge's cases did not have): found and dropped like one that breaks the forward. Asked to route
            # every call (--route all), the check is reported as it is, failed.
            raise OverTolerance(f"the model with every kernel routed is off by {checked_error:.3g}, over the "
                                f"tolerance {allowed:.3g}")
        checked = router.summary()
        records = route_table.measure(router, on_gpu, log, drops)
        for rewrite in applied:
            if rewrite.record is not None:
                records[rewrite.kind.name] = [rewrite.record]

    # Regions are routed by a backend of their own, which then hands the graph to Inductor.
    ours_backend = router.regions.compile_backend if router.regions is not None and backend == INDUCTOR else backend

    def run_ours(variant: str, paired: bool = False, retime=None) -> VariantResult:
        log(f"timing {VARIANTS[variant][0]}")
        if VARIANTS[variant][2] is not None:
            resolve_routes(router, model, inputs)
        return variants.run_routed(variant, model, inputs, expected, on_gpu, ours_backend, router.kernels, log,
                                   paired_with=router.bypassed if paired else None, retime=retime)

    extra = {}
    if overhead:
        from autokernel.verify import overhead as overhead_figures

        extra["overhead"] = drops.contained(OVERHEAD, "the routing's own cost", lambda: overhead_figures.measure(
            router, records, results, run_ours, lambda: model(*inputs), on_gpu))
    route_table.apply(router.kernels, records)
    router.release_examples()
    router.set_policy(policy)

    def forget() -> None:
        router.forget_decisions()
        for rewrite in applied:
            rewrite.sync()
    forget()
    trials, paired = [], {}
    # A compiled trial times ours through one compiled object that holds PyTorch's path too, switched repeat by
    # repeat; under CUDA graphs such an object's calls cost more than those of a model compiled once (session 17,
    # H200: MobileNetV3 with its folds 0.618 ms paired, 0.287 ms the same routes on their own), and PyTorch's best
    # is timed on its own. So the routes a compiled selection keeps are timed again on their own, as they are run.
    if policy == MEASURED and on_gpu:
        compiled_variant = next((v for v in ("ours_cudagraphs", "ours_compile") if v in names), None)
        for mode, variant in _modes_in_order(results, allowed, compiled_variant):
            if variant is None:
                continue
            for rewrite in applied:
                rewrite.candidate(mode)
            # A check builds and times ours and PyTorch's path in turn: about twice PyTorch's variant, at first.
            theirs = results.get(variants.in_mode(variant, ours=False))
            first_cost_s = 2 * (theirs.seconds or 0.0) if theirs is not None else 0.0
            kept, mode_trials = drops.contained(SELECTION, f"the {mode} routes", lambda: selection.select(
                mode, records, variant, lambda v, retime: run_ours(v, paired=True, retime=retime), forget, allowed,
                log, first_cost_s),
                default=(None, []))
            trials += mode_trials
            if kept is not None:
                results[variant] = run_ours(variant) if mode == "compiled" else kept
                paired[variant] = selection.in_turn(mode_trials)
    rows = [record for kernel_records in records.values() for record in kernel_records]
    routed = {"ours": policy == ALL or any(r.route_eager for r in rows)}
    routed["ours_compile"] = routed["ours_cudagraphs"] = policy == ALL or any(r.route_compiled for r in rows)
    for variant in (v for v in names if VARIANTS[v][1] and v not in results):
        results[variant] = run_ours(variant) if routed[variant] else VariantResult(
            variant, failed="nothing routed: no kernel made the model faster in this mode")
    routing = drops.contained(COUNTS, "one forward's hits and fallbacks", lambda: _one_forward_counts(
        router, model, inputs), default=router.summary())
    for rewrite in applied:
        routing[rewrite.kind.report_key] = rewrite.summary()
    theirs_best, ours_best = variants.bests(results, allowed, like_with_like=True)
    pair = None
    if on_gpu and theirs_best and ours_best and head_to_head.worth_pairing(theirs_best.ms / ours_best.ms,
                                                                           paired.get(ours_best.variant) is not None):
        resolve_routes(router, model, inputs)
        pair = drops.contained(HEAD_TO_HEAD, "the two bests timed in turn", lambda: head_to_head.measure(
            model, inputs, router, ours_best.variant, theirs_best.variant, ours_backend, backend, on_gpu, log))
    return {"routed_any": any(routed.values()), "head_to_head": pair, "regions": router.regions is not None,
            "checked_error": checked_error,
            "checked": checked, "routing": routing, "route_table": _table_rows(records),
            "selection": [trial.to_json() for trial in trials], "in_turn": paired, "records": records, **extra}


def _modes_in_order(results: dict[str, VariantResult], allowed: float,
                    compiled_variant: str | None) -> list[tuple[str, str | None]]:
    """The selection's modes, the mode of PyTorch's best first: under verify's time limit (deadline.py) the checks
    made first are the ones made at all, and where PyTorch's best is compiled (most models on a GPU), eager checks
    made first could leave no time for the compiled ones, which have that best in their own mode to beat."""
    theirs = variants.bests(results, allowed)[0]
    modes = [("eager", "ours"), ("compiled", compiled_variant)]
    return modes[::-1] if theirs is not None and VARIANTS[theirs.variant][2] is not None else modes


def resolve_routes(router, model, inputs: tuple) -> None:
    """Make the router's decisions for these inputs on eager calls. A compiled graph only reads the
    decisions (they are constants in it), so after the selection dropped them (forget_decisions) a
    compiled variant traced first routed nothing, and timed PyTorch's own path as ours. With norm
    folding the first call only watches, so it takes two."""
    with torch.no_grad():
        for _ in range(2 if router.folding is not None else 1):      # as routing/regions/routing.py run_model counts
            model(*inputs)


def _profiler_of(profiled: dict, log: Callable[[str], None]) -> Callable[[Callable[[], object]], None]:
    """What variants.run hands the compiled forward to: its kernel times, or what broke them, into `profiled`."""
    def profile(call: Callable[[], object]) -> None:
        log("profiling torch.compile's forward (where its GPU time goes)")
        try:
            profiled["times"] = headroom.kernel_times(call)
        except Exception as exc:      # the headroom is a note beside the verdict: _headroom drops it, nothing else
            profiled["error"] = exc
    return profile


def _headroom(results: dict[str, VariantResult], profiled: dict) -> headroom.Headroom | None:
    """Where torch.compile's forward spends its GPU time (before any kernel is plugged in), on a GPU."""
    if "error" in profiled:
        raise profiled["error"]
    best = [r.ms for r in results.values() if r.ms]
    if not profiled.get("times") or not results.get("compile") or not results["compile"].ms or not best:
        return None
    return headroom.from_times(profiled["times"], min(best))


def _one_forward_counts(router, model, inputs) -> dict:
    """The hits and fallbacks of exactly one forward pass, with the routes as finally decided."""
    with torch.no_grad():
        model(*inputs)            # resolves the routes if the decisions were dropped
        router.reset_stats()
        model(*inputs)
    return router.summary()


def _table_rows(records: dict) -> list[dict]:
    return [{"kernel": name, **record.to_json()} for name, kernel_records in records.items()
            for record in kernel_records]
