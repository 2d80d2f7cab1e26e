"""Run the judge on every starter kernel and write one table: correctness, latency, throughput, speedups.

    python benchmarks/kernels.py bench-all [--types softmax,matmul] [--dtype float16] [--out benchmarks/results]

Each starter goes through the real bench.py in its own process (five stages, then timing with
--compare-compile), exactly as the loop runs it. The wall time of each process is recorded too,
and a plain run (no torch.compile) of each memory-bound kernel shows what one loop experiment costs.
"""

from __future__ import annotations

import argparse

from autokernel.core.paths import starter_path
from autokernel.kernel_types import registry
from benchmarks.common import RESULTS, dated_path, fmt, run_info, run_judge as judge, table_header, write_text


def run_judge(kernel_type: str, dtype: str, compare_compile: bool) -> tuple[dict, float]:
    result, wall, proc = judge(starter_path(kernel_type), "--dtype", dtype,
                               *(["--compare-compile"] if compare_compile else []))
    if result is None:
        return {"kernel_type": kernel_type, "correctness": "CRASH", "message": proc.stderr[-500:]}, wall
    return result, wall


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--types", default=",".join(registry.REGISTRY))
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", default=str(RESULTS))


def main(args: argparse.Namespace) -> int:
    info = run_info("cpu (interpreter: timings NOT MEANINGFUL)")
    lines = [f"# bench.py on every starter: {info.device}", "",
             f"date {info.date}, {info.versions()}, dtype {args.dtype}; "
             "latency = median of triton.testing.do_bench with L2 flushed; speedups are PyTorch eager / ours and "
             "torch.compile / ours at the same shape in the same process.", "",
             *table_header(["kernel", "result", "shape", "latency us", "throughput", "% peak", "vs eager", "vs compile",
                            "peak VRAM MB", "bench wall s (with compile)"])]
    failures = 0
    for kernel_type in args.types.split(","):
        result, wall = run_judge(kernel_type, args.dtype, compare_compile=True)
        ok = result["correctness"] == "PASS"
        failures += not ok
        shape = ";".join(t["shape"] for t in result.get("timings", [])) or "-"
        throughput = f"{fmt(result.get('throughput'))} {result.get('throughput_unit') or ''}"
        lines.append(f"| {kernel_type} | {result['correctness']}{'' if ok else ': ' + str(result.get('message'))[:200]} "
                     f"| {shape} | {fmt(result.get('latency_us'))} | {throughput} | {fmt(result.get('pct_peak'))} "
                     f"| {fmt(result.get('speedup_vs_pytorch'), '.2f')} | {fmt(result.get('speedup_vs_compile'), '.2f')} "
                     f"| {fmt(result.get('peak_vram_mb'), '.0f')} | {wall:.1f} |")
        print(lines[-1], flush=True)
    lines += ["", "Wall time of one plain `python bench.py` process (five stages + timing, no torch.compile), "
              "memory-bound kernels:", "", *table_header(["kernel", "result", "wall s", "stage seconds"])]
    for kernel_type in args.types.split(","):
        if kernel_type in ("matmul", "flash_attention", "fused_mlp"):
            continue
        result, wall = run_judge(kernel_type, args.dtype, compare_compile=False)
        stages = ", ".join(f"{s['stage']} {s['seconds']:.2f}" for s in result.get("stages", []))
        lines.append(f"| {kernel_type} | {result['correctness']} | {wall:.1f} | {stages} |")
        print(lines[-1], flush=True)
    path = write_text(dated_path(args.out, info, "bench_all.md"), "\n".join(lines) + "\n")
    print(f"wrote {path}")
    return 1 if failures else 0

