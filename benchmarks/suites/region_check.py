"""Issue 25 on a GPU: regions of the new problem files, their starters made from Inductor's code, judged against it.

    python benchmarks/kernels.py region-check --out DIR [--problems tanh_gelu_in_ops,log_softmax,...] [--budget 7m]
    python benchmarks/kernels.py region-check --dry-run --out DIR      # the same steps on CPU, sizes divided by 64
    python benchmarks/kernels.py region-check --out DIR --problems gemm --gpus 4    # issue 35: one GEMM problem a GPU

For each problem file (benchmarks/problems/, float32, at its own shapes), in order, until --budget is
spent (no problem starts after it):
  1. its regions are found as the profiler finds them (autokernel/profile/regions/find.py);
  2. each region's starter is generated on this GPU (autokernel/profile/regions/jobs.py: Inductor compiles the
     region with fullgraph=True, autotunes it on drawn inputs, and its kernels, grids and chosen
     configs are written as a plain kernel file), timed;
  3. bench.py judges the starter in the sandbox, as the loop does (--quick --compare-compile): the
     five stages at the model's shapes, then its GPU time against torch.compile of the region's
     reference. A starter at torch.compile's speed is the claim of issue 25, item 3 ("compile
     parity by construction"): the ratio column should be about 1.00. A GEMM region's file holds
     Inductor's code and ours (the menu matmul's GEMM with the region's epilogue: gemm_variant.py):
     each is judged apart, and the row's starter is the one pick.py's rule puts first (the faster
     PASS), as extract and verify --starters would (issue 35: `--problems gemm`).
Prints a markdown table and writes DIR/region_check.md and DIR/region_check.json (with the device,
date, torch and Triton versions). About 6 minutes on an H100 for the default problems; --budget stops
it early. Without a GPU, --dry-run runs the same steps through Triton's interpreter at small sizes
(timings NOT MEANINGFUL), to check the script itself.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from autokernel.core import interpreter
from benchmarks.common import load_problem as _load_problem, run_info, write_json, write_text

GEMM_PROBLEMS = ["gemm_sigmoid_rowsum", "gemm_gelu_scale", "gemm_relu_rowmax", "gemm_sigmoid_sum_logsumexp"]
DEFAULT_PROBLEMS = ["tanh_gelu_in_ops", "log_softmax", "l1_norm", "kl_div_loss", "hinge_loss", "gemm_sigmoid_rowsum",
                    "gemm_gelu_scale", "cumsum_rows", "multihead_attention"]
DRY_RUN_DIVISOR = 64
KEPT = {"HEADS"}


def load_problem(name: str, divisor: int):
    return _load_problem(name, divisor, KEPT)


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def check_problem(name: str, divisor: int, device, folder: Path, log) -> list[dict]:
    import torch

    from autokernel.judge import runner
    from autokernel.kernel_types.regions import store
    from autokernel.profile.regions import jobs as region_jobs
    from autokernel.profile.regions.find import find_regions

    module = load_problem(name, divisor)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval().to(device)
    inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs())
    found = find_regions(model, inputs, name=name)
    rows = []
    for region in found.regions:
        store.save(region, folder / "regions")
        row = {"problem": name, "region": region.name, "ops": " -> ".join(region.ops()),
               "instances": region.about.instances}
        started = time.monotonic()
        try:
            source = region_jobs.starter_source(region.name, judged=False)    # its variants are judged apart below
        except Exception as exc:        # said in its row: a region whose code cannot be a starter
            row.update(starter=f"none: {type(exc).__name__}: {str(exc)[:160]}")
            rows.append(row)
            log(f"   {row['ops']}: {row['starter']}")
            continue
        row["generate_s"] = round(time.monotonic() - started, 1)
        kernel = folder / f"{name}_{region.name}.py"
        kernel.write_text(source)
        started = time.monotonic()
        judged = {variant: judge(kernel, variant, region) for variant in gemm_variants(source)}
        result = judged[next(iter(judged))]
        row.update(judge=result["correctness"], judge_s=round(time.monotonic() - started, 1),
                   message=(result.get("message") or "")[:200], starter_us=result.get("latency_us"),
                   compile_us=result.get("compile_latency_us"), eager_us=result.get("pytorch_latency_us"),
                   kernels=source.count("@triton.jit"))
        if len(judged) > 1:      # a GEMM region: Inductor's code and ours judged apart; the pick's rule says which leads
            from autokernel.profile.regions import pick

            verdicts = [pick.Verdict(v, r["correctness"], r.get("latency_us"), r.get("message") or "")
                        for v, r in judged.items()]
            row["variants"] = {v: {"judge": r["correctness"], "us": r.get("latency_us"),
                                   "message": (r.get("message") or "")[:200]} for v, r in judged.items()}
            row["picked"] = next(iter(pick.order(dict.fromkeys(judged), "engine", verdicts)))
            best = row["variants"][row["picked"]]
            compiled = [r.get("compile_latency_us") for r in judged.values() if r.get("compile_latency_us")]
            row.update(judge=best["judge"], starter_us=best["us"], message=best["message"],
                       compile_us=compiled[0] if compiled else None)
        if row["starter_us"] and row["compile_us"]:
            row["compile_over_starter"] = round(row["compile_us"] / row["starter_us"], 3)
        rows.append(row)
        log(f"   {row['ops']}: {row['judge']} starter {row.get('starter_us')} us, compile {row.get('compile_us')} us"
            + (f"; {row['variants']}, picked {row['picked']}" if "variants" in row else ""))
    if not found.regions:
        rows.append({"problem": name, "region": None, "ops": "no region", "skipped": found.skipped[:3]})
    return rows


def gemm_variants(source: str) -> list[str]:
    """The variants judged apart: Inductor's code and ours for a GEMM region (its file holds an "engine"), else the
    file as it is (one judge run)."""
    from autokernel.agents.tunables import read_tunables

    choices = read_tunables(source)[1].get("variant", [])
    return ["inductor", "engine"] if "engine" in choices else [""]


def judge(kernel: Path, variant: str, region) -> dict:
    """bench.py on the kernel file (--quick --compare-compile), with TUNABLES["variant"] set to variant if one."""
    from autokernel.agents.tunables import read_tunables, rewrite_tunables
    from autokernel.judge import runner

    if variant:
        source = kernel.read_text()
        kernel = kernel.with_name(f"{kernel.stem}.{variant}.py")
        kernel.write_text(rewrite_tunables(source, {**read_tunables(source)[0], "variant": variant}))
    # The output folder may be in a home folder, which the sandbox hides: the kernel's folder is named readable.
    return runner.run_bench(kernel, shapes=[region.shape()], dtype=region.definition.dtype, timeout_s=300, seed=1,
                            extra_args=["--quick", "--compare-compile"], readable=[kernel.parent]).to_json()


def table(rows: list[dict], meaningful: bool) -> str:
    lines = ["| problem | region ops | kernels | generated in | judge | starter us | torch.compile us | "
             "compile / starter | Inductor's us | ours (GEMM engine) us | picked |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        def fmt(key, unit=""):
            value = row.get(key)
            return "-" if value is None else f"{value:.1f}{unit}" if isinstance(value, float) else str(value)
        judge = row.get("judge") or row.get("starter") or "-"
        if row.get("message"):
            judge += f" ({row['message'][:80]})"
        variants = row.get("variants", {})
        apart = [f"{v['judge']} {v['us']:.1f}" if v.get("us") else v.get("judge", "-")
                 for v in (variants.get("inductor", {}), variants.get("engine", {}))] if variants else ["-", "-"]
        lines.append(f"| {row['problem']} | {row['ops']} | {fmt('kernels')} | {fmt('generate_s', ' s')} | {judge} | "
                     f"{fmt('starter_us')} | {fmt('compile_us')} | {fmt('compile_over_starter')} | {apart[0]} | "
                     f"{apart[1]} | {row.get('picked', '-')} |")
    if not meaningful:
        lines.append("\nCPU interpreter (--dry-run): the timings are NOT MEANINGFUL.")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for region_check.md, region_check.json and the kernels")
    parser.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS),
                        help=f"comma-separated problem names, or 'gemm' for {','.join(GEMM_PROBLEMS)}")
    parser.add_argument("--budget", default="7m", help="start no problem after this long (default 7m)")
    parser.add_argument("--dry-run", action="store_true", help="on CPU, sizes divided by 64 (checks the script)")
    parser.add_argument("--gpus", type=int, default=1,
                        help="problems checked side by side, one per GPU (CUDA_VISIBLE_DEVICES), each in OUT/gpuI")


def side_by_side(args: argparse.Namespace, names: list[str]) -> list[dict]:
    """The problems dealt round-robin to --gpus children of this script, each on one GPU; their rows in order."""
    import json
    import subprocess

    children = []
    for index in range(min(args.gpus, len(names))):
        part = ",".join(names[index::args.gpus])
        out = Path(args.out) / f"gpu{index}"
        cmd = [sys.executable, str(Path(__file__).resolve().parents[1] / "kernels.py"), "region-check", "--out",
               str(out), "--problems", part, "--budget", args.budget] + (["--dry-run"] if args.dry_run else [])
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(index)} if not args.dry_run else dict(os.environ)
        children.append((out, subprocess.Popen(cmd, env=env)))
    rows = []
    for out, child in children:
        child.wait()
        result = out / "region_check.json"
        rows += json.loads(result.read_text())["rows"] if result.is_file() else \
            [{"problem": str(out), "ops": f"the child exited {child.returncode} without a result"}]
    order = {name: index for index, name in enumerate(names)}
    return sorted(rows, key=lambda row: order.get(row.get("problem"), len(order)))


def main(args: argparse.Namespace) -> int:
    interpreter.choose()
    import torch

    from autokernel.kernel_types.regions import store

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.dry_run:
        print("kernels.py region-check: no GPU; pass --dry-run to check the script on CPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store.add_folder(out / "regions")
    os.environ[store.FOLDERS_VARIABLE] = str((out / "regions").resolve())      # the judge reads the regions there
    device = torch.device("cuda" if on_gpu else "cpu")
    started, budget, rows = time.monotonic(), parse_duration(args.budget), []
    names = GEMM_PROBLEMS if args.problems == "gemm" else args.problems.split(",")
    if args.gpus > 1:
        rows, names = side_by_side(args, names), []
    for name in names:
        if time.monotonic() - started > budget:
            rows.append({"problem": name, "ops": "not run: the budget was spent"})
            continue
        print(f"== {name}", flush=True)
        rows += check_problem(name, DRY_RUN_DIVISOR if args.dry_run else 1, device, out, lambda line: print(line, flush=True))
    text = table(rows, on_gpu)
    info = run_info("cpu (dry run)", on_gpu)
    header = (f"region_check.py on {info.device}, {info.date}, torch {info.torch}, Triton {info.triton}, "
              f"{time.monotonic() - started:.0f} s\n\n")
    print(header + text)
    write_text(out / "region_check.md", header + text + "\n")
    write_json(out / "region_check.json", {**info.as_dict(), "rows": rows})
    return 0

