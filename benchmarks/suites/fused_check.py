"""The fused GEMM starters against PyTorch eager and torch.compile at the LLaMA models' own shapes, in float16.

fused_mlp and rmsnorm_mlp (each with its dual gate/up GEMM and with the two-launch plan) at every
gated MLP of the LLaMA models, rmsnorm_linear at their q/k/v (the GQA model's 512-wide k and v too)
and LM-head shapes: the starters as they are, with the measured plan table of a gemm-sweep run
installed in this process (--table), so this shows what the second GPU call's verify will route.
Every output is checked against the float32 reference by the judge's tolerance rule; times are
triton.testing.do_bench medians (L2 flushed), the final ratio the median of three alternating
repeats of our best variant and torch.compile (default mode, one compiled function per type and
dynamic shapes after the first, as torch.compile makes them).

    python benchmarks/kernels.py fused-check --table OUT/gemm_table.json --out OUT [--budget-s 150]
    python benchmarks/kernels.py fused-check --dry-run --out OUT              # CPU: the interpreter, tiny shapes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.common import ROOT, run_info, timer_ms, write_json

MLP_VARIANTS = ("dual", "two_launch")
NORMED_LINEARS = ("q_proj", "k_proj", "v_proj", "lm_head")
REPEATS = 3


def cases(tiny: bool) -> list[tuple[str, dict]]:
    """(type, shape) at the LLaMA models' gated MLPs and normed linears (GPT-2 and BERT normalize with LayerNorm)."""
    from benchmarks.suites.model_gemms import model_gemms
    found = []
    for gemm in model_gemms(tiny=tiny, only=["llama 4x1024", "hf llama GQA 4x1024", "llama 1x512"]):
        if gemm.kind == "dual":
            found += [(t, {"M": gemm.M, "D": gemm.K, "F": gemm.N, "act": "silu"}) for t in ("fused_mlp", "rmsnorm_mlp")]
        elif any(use.split(".")[-1] in NORMED_LINEARS for use in gemm.uses):
            found.append(("rmsnorm_linear", {"M": gemm.M, "N": gemm.N, "K": gemm.K}))
    return found


def load_starters(names: set[str], plans: dict | None) -> dict:
    """The starters, with `plans` (a sweep's table) in place of their own GEMM_TABLE where given."""
    from autokernel.core.kernel_file import import_file
    modules = {}
    for name in names:
        module = import_file(ROOT / "kernels" / f"{name}.py", f"_fused_check_{name}")
        if plans is not None:
            module.GEMM_TABLE.clear()
            module.GEMM_TABLE.update(plans)
        modules[name] = module
    return modules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--table", type=Path, help="a gemm-sweep gemm_table.json to install (default: the starters')")
    parser.add_argument("--budget-s", type=float, default=150.0, help="start no new case after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="CPU: the interpreter at the tiny models' shapes")


def main(args: argparse.Namespace) -> int:
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from autokernel.judge.correctness import reference_outputs, tolerance_used
    from autokernel.kernel_types import registry
    gpu = torch.cuda.is_available() and not args.dry_run
    device = "cuda" if gpu else "cpu"

    time_ms = timer_ms(gpu, warmup=5, rep=50, cpu_calls=1)
    info = run_info(on_gpu=gpu)

    plans = json.loads(args.table.read_text())["plans"] if args.table else None
    todo = cases(args.dry_run)
    starters = load_starters({name for name, _ in todo}, plans)
    compiled = {name: torch.compile(registry.get(name).pytorch) for name in starters}
    args.out.mkdir(parents=True, exist_ok=True)
    rows, began = [], time.monotonic()
    for name, shape in todo:
        if time.monotonic() - began > args.budget_s:
            print(f"past --budget-s {args.budget_s:g}: not started: {name} {registry.format_shape(shape)}", flush=True)
            continue
        kt, module = registry.get(name), starters[name]
        inputs = kt.inputs(shape, torch.float16, seed=len(rows) + 1, device=device)
        expected, oracle, _ = reference_outputs(kt, inputs, torch.float16)
        variants = MLP_VARIANTS if "gate_up" in module.TUNABLES else ("default",)
        row = {"type": name, "shape": registry.format_shape(shape), "variants": {}}
        for variant in variants:
            if variant != "default":
                module.TUNABLES["gate_up"] = variant
            try:
                used = tolerance_used(module.kernel_fn(**inputs), expected, oracle, torch.float16)
                row["variants"][variant] = {"tolerance_used": round(used, 3),
                                            "us": time_ms(lambda: module.kernel_fn(**inputs)) * 1e3 if used <= 1 else None}
            except Exception as exc:      # a variant that fails is a row, not the end of the run
                row["variants"][variant] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        if "gate_up" in module.TUNABLES:
            module.TUNABLES["gate_up"] = "dual"
        timed = {v: r["us"] for v, r in row["variants"].items() if r.get("us")}
        row["eager_us"] = time_ms(lambda: kt.pytorch(**inputs)) * 1e3
        compiled[name](**inputs)        # compile outside the timing
        if timed:
            best = min(timed, key=timed.get)
            if best != "default":
                module.TUNABLES["gate_up"] = best
            ours, theirs = [], []
            for _ in range(REPEATS):
                ours.append(time_ms(lambda: module.kernel_fn(**inputs)))
                theirs.append(time_ms(lambda: compiled[name](**inputs)))
            if "gate_up" in module.TUNABLES:
                module.TUNABLES["gate_up"] = "dual"
            row.update(best=best, ours_us=statistics.median(ours) * 1e3, compile_us=statistics.median(theirs) * 1e3,
                       vs_compile=statistics.median(t / o for t, o in zip(theirs, ours)))
        rows.append(row)
        print(f"[{time.monotonic() - began:4.0f} s] {name} {row['shape']}: "
              + ", ".join(f"{v} {r.get('us') or 0:.1f} us" for v, r in row["variants"].items())
              + f"; eager {row['eager_us']:.1f}, compile {row.get('compile_us', 0):.1f}: "
              f"{row.get('vs_compile', 0):.3f}x torch.compile", flush=True)
        write_json(args.out / "fused_check.json", {**info.as_dict(), "rows": rows}, indent=1)
    print("\n| type | shape | " + " | ".join(f"ours {v} us" for v in MLP_VARIANTS) + " | eager us | torch.compile us "
          "| ours best us | vs torch.compile |\n|---|---|---|---|---|---|---|---|")
    for row in rows:
        cells = [f"{row['variants'].get(v, row['variants'].get('default', {})).get('us') or 0:.1f}" for v in MLP_VARIANTS]
        print(f"| {row['type']} | {row['shape']} | {' | '.join(cells)} | {row['eager_us']:.1f} | "
              f"{row.get('compile_us', 0):.1f} | {row.get('ours_us', 0):.1f} | {row.get('vs_compile', 0):.3f} |")
    return 0

