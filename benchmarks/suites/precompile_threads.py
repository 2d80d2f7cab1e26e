"""Regions' autotuned Inductor codegen under the gate's TORCHINDUCTOR_COMPILE_THREADS=1: configs one by one, or threads.

    python benchmarks/end_to_end.py precompile-threads [--out DIR] [--side-by-side 8] [--regions 2] [--timeout 150]
        [-- MODEL ARGS]     (DIR defaults to $OUT; MODEL ARGS as verify.py takes them, default models/gpt2.py float16)

Inductor's max-autotune precompiles a GEMM or convolution template's configs in as many threads as
TORCHINDUCTOR_COMPILE_THREADS says, the variable that sizes its compile-worker pool too; the gate sets it to 1 (no
pools for eight runs side by side), and autokernel/profile/regions/inductor.py's _precompile_threads gives the
precompile the CPUs whatever it says. This times inductor.generate (autotuned) on the model's first --regions regions
that start with a GEMM or a convolution, in --side-by-side processes at once as the gate runs them, once with the
threads ("threads") and once without them ("serial": the code before), each process with compiler caches of its
own. Writes precompile_threads.json and precompile_threads.md under DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = ("serial", "threads")
DEFAULT_MODEL = ["models/gpt2.py", "--dtype", "float16"]


def child(mode: str, regions: int, model_args: list[str]) -> None:
    """One process: the model's first regions with a head, each made by Inductor autotuned; a JSON line per region."""
    from autokernel.core import interpreter

    interpreter.choose()
    from autokernel.kernel_types.regions import ops
    from autokernel.profile import model_args as model_arguments
    from autokernel.profile import models
    from autokernel.profile.regions import inductor
    from autokernel.profile.regions.find import find_regions
    from autokernel.verify import verify_command

    if mode == "serial":          # the code before: the precompile takes TORCHINDUCTOR_COMPILE_THREADS threads
        inductor._precompile_threads = contextlib.nullcontext
    args = verify_command.build_parser().parse_args([*model_args, "--workspace", tempfile.mkdtemp()])
    loaded = models.load_model(**model_arguments.load_model_keywords(args))
    inputs = tuple(loaded.inputs) if isinstance(loaded.inputs, (tuple, list)) else (loaded.inputs,)
    found = find_regions(loaded.model, inputs, name=loaded.name)
    headed = [r for r in found.regions if set(ops.HEADS) & set(r.about.kinds)][:regions]
    for region in headed:
        began = time.perf_counter()
        try:
            inductor.generate(region.definition, loaded.device, autotune=True)
            failed = None
        except Exception as exc:            # a region Inductor cannot make: said, and the next one timed
            failed = f"{type(exc).__name__}: {str(exc)[:200]}"
        print(json.dumps({"mode": mode, "region": region.label, "seconds": time.perf_counter() - began,
                          "failed": failed}), flush=True)


def side_by_side(mode: str, count: int, regions: int, timeout_s: float, model_args: list[str]) -> list[dict]:
    """`count` children at once, each with caches of its own and TORCHINDUCTOR_COMPILE_THREADS=1; their lines."""
    procs = []
    for _ in range(count):
        caches = tempfile.mkdtemp(prefix="precompile_threads_")
        env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONPATH": str(ROOT),
               "TORCHINDUCTOR_CACHE_DIR": f"{caches}/inductor", "TRITON_CACHE_DIR": f"{caches}/triton"}
        procs.append(subprocess.Popen([sys.executable, __file__, mode, str(regions), *model_args], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    deadline, rows = time.monotonic() + timeout_s, []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:          # what it finished before the limit still counts
            proc.kill()
            out, _ = proc.communicate()
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows


def summary(rows: list[dict]) -> dict:
    done = [row["seconds"] for row in rows if not row["failed"]]
    return {"regions_made": len(done), "failed": sum(1 for row in rows if row["failed"]),
            "median_s": statistics.median(done) if done else None, "total_s": sum(done)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for the results (default: $OUT)")
    parser.add_argument("--side-by-side", type=int, default=8, help="processes at once, as the gate's runs")
    parser.add_argument("--regions", type=int, default=2, help="regions with a GEMM or convolution per process")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds for each mode's processes")
    parser.add_argument("model", nargs=argparse.REMAINDER, help="the model as verify.py takes it, after --")


def main(args: argparse.Namespace) -> int:
    model_args = [arg for arg in args.model if arg != "--"] or DEFAULT_MODEL
    if not args.out:
        args.parser.error("give --out DIR (or set $OUT)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in MODES:
        rows = side_by_side(mode, args.side_by_side, args.regions, args.timeout, model_args)
        results[mode] = {"rows": rows, **summary(rows)}
        print(f"{mode}: {json.dumps(summary(rows))}", flush=True)
    settings = {"model": model_args, "side_by_side": args.side_by_side, "regions": args.regions,
                "timeout_s": args.timeout}
    (out / "precompile_threads.json").write_text(json.dumps({**settings, **results}, indent=2) + "\n")
    lines = ["| mode | regions made | failed | median s | total s |", "|---|---|---|---|---|"]
    for mode in MODES:
        r = results[mode]
        median = f"{r['median_s']:.1f}" if r["median_s"] is not None else "-"
        lines.append(f"| {mode} | {r['regions_made']} | {r['failed']} | {median} | {r['total_s']:.1f} |")
    (out / "precompile_threads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":          # one child: MODE REGIONS MODEL ARGS...
    child(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
