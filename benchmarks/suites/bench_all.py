"""Run the judge on every starter kernel and write one table: correctness, latency, throughput, speedups.

    python benchmarks/bench_all.py [--types softmax,matmul] [--dtype float16] [--out benchmarks/results]

Each starter goes through the real bench.py in its own process (five stages, then timing with
--compare-compile), exactly as the loop runs it. The wall time of each process is recorded too,
and a plain run (no torch.compile) of each memory-bound kernel shows what one loop experiment costs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autokernel.core.paths import starter_path  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402


def run_judge(kernel_type: str, dtype: str, compare_compile: bool) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, str(ROOT / "bench.py"), "--kernel", str(starter_path(kernel_type)), "--dtype", dtype,
               "--json-out", str(out)] + (["--compare-compile"] if compare_compile else [])
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - started
        if not out.exists():
            return {"kernel_type": kernel_type, "correctness": "CRASH", "message": proc.stderr[-500:]}, wall
        return json.loads(out.read_text()), wall


def fmt(value, spec=".1f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default=",".join(registry.REGISTRY))
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (interpreter: timings NOT MEANINGFUL)"
    lines = [f"# bench.py on every starter: {device}", "",
             f"date {datetime.date.today()}, torch {torch.__version__}, triton {triton.__version__}, dtype {args.dtype}; "
             "latency = median of triton.testing.do_bench with L2 flushed; speedups are PyTorch eager / ours and "
             "torch.compile / ours at the same shape in the same process.", "",
             "| kernel | result | shape | latency us | throughput | % peak | vs eager | vs compile | peak VRAM MB | "
             "bench wall s (with compile) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
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
              "memory-bound kernels:", "", "| kernel | result | wall s | stage seconds |", "|---|---|---|---|"]
    for kernel_type in args.types.split(","):
        if kernel_type in ("matmul", "flash_attention", "fused_mlp"):
            continue
        result, wall = run_judge(kernel_type, args.dtype, compare_compile=False)
        stages = ", ".join(f"{s['stage']} {s['seconds']:.2f}" for s in result.get("stages", []))
        lines.append(f"| {kernel_type} | {result['correctness']} | {wall:.1f} | {stages} |")
        print(lines[-1], flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device.split(" (")[0].replace(" ", "-")
    path = out_dir / f"{datetime.date.today()}_{slug}_bench_all.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
