"""Does folding RMSNorm into the next linear pay? The rmsnorm_linear starter against eager and torch.compile.

    python benchmarks/kernels.py fusion-check [--dtype float16] [--out DIR]     (a GPU is required)

At LLaMA shapes (M tokens in 1, 16, 512, 4096; K = 2048; N = 2048 for q/k/v/o, 5632 for gate/up)
three implementations of y = rmsnorm(x, g) @ W^T are timed with triton.testing.do_bench (median,
L2 flushed between calls) on the same inputs:
  - the starter kernels/rmsnorm_linear.py (one launch, the normalized x never written);
  - eager PyTorch as a model runs it: reference.rmsnorm, then F.linear (cuBLAS);
  - torch.compile of reference.rmsnorm_linear (Inductor: a fused norm kernel, then cuBLAS).
Each output is checked against a float32 oracle under the judge's tolerance first, so a fast wrong
answer cannot top the table. Prints a table and writes fusion_check.json to --out, or to $OUT
when set. About a minute on an H100, most of it torch.compile.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import reference
from autokernel.core.dtypes import DTYPES, TOLERANCES
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel
from autokernel.kernel_types import registry
from benchmarks.common import do_bench_ms as _ms, run_info, write_json

ROWS = (1, 16, 512, 4096)
K = 2048
COLUMNS = (2048, 5632)
DEVICE = "cuda"


def _share_of_tolerance(out: torch.Tensor, oracle: torch.Tensor, dtype: torch.dtype) -> float:
    """The largest error as a share of the judge's allowance, tol * (RMS + |oracle|): at most 1 passes."""
    tol = TOLERANCES[dtype]
    rms = oracle.pow(2).mean().sqrt()
    return float(((out.float() - oracle).abs() / (tol * rms + tol * oracle.abs())).max())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for fusion_check.json (default $OUT)")


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("fusion_check needs a GPU: the CPU interpreter's timings mean nothing", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    kernel, _ = load_kernel(starter_path("rmsnorm_linear"))
    torch._dynamo.config.cache_size_limit = 64          # one graph per shape (dynamic=False)
    compiled = torch.compile(reference.rmsnorm_linear, dynamic=False)
    kt = registry.get("rmsnorm_linear")
    rows = []
    for n in COLUMNS:
        for m in ROWS:
            shape = {"M": m, "N": n, "K": K}
            inputs = kt.inputs(shape, dtype, seed=0, device=DEVICE)
            x, g, w, eps = inputs["x"], inputs["norm_weight"], inputs["weight"], inputs["eps"]
            oracle = reference.rmsnorm_linear(x.double(), g.double(), w.double(), eps).float()
            impls = {
                "starter": lambda: kernel.kernel_fn(x, g, w, eps),
                "eager": lambda: F.linear(reference.rmsnorm(x, g, eps), w),
                "compile": lambda: compiled(x, g, w, eps),
            }
            row = {"M": m, "N": n, "K": K, "dtype": args.dtype}
            for name, fn in impls.items():
                share = _share_of_tolerance(fn(), oracle, dtype)
                row[f"{name}_tolerance_used"] = share
                row[f"{name}_us"] = _ms(fn) * 1e3 if share <= 1.0 else None
            flops = kt.flops(shape)
            if row["starter_us"]:
                row["starter_tflops"] = flops / (row["starter_us"] * 1e-6) / 1e12
                row["starter_gbps"] = kt.bytes_moved(shape, x.element_size()) / (row["starter_us"] * 1e-6) / 1e9
                for base in ("eager", "compile"):
                    row[f"vs_{base}"] = row[f"{base}_us"] / row["starter_us"] if row[f"{base}_us"] else None
            rows.append(row)
            print(_line(row), flush=True)
    info = run_info()
    print(f"\n{info.device}, {info.versions()}, {args.dtype}; "
          "do_bench median, L2 flushed; 'x' = their time / the starter's (> 1: the starter is faster)")
    if args.out:
        out = write_json(Path(args.out) / "fusion_check.json", {**info.as_dict(), "rows": rows})
        print(f"wrote {out}")
    return 0


def _line(row: dict) -> str:
    def us(key):
        return f"{row[key]:9.1f}" if row.get(key) else "    WRONG"

    def ratio(key):
        return f"{row[key]:5.2f}x" if row.get(key) else "    - "
    if not hasattr(_line, "printed"):
        _line.printed = True
        print(f"{'M':>5} {'N':>5} {'K':>5} | {'starter us':>10} {'eager us':>9} {'compile us':>10} | "
              f"{'vs eager':>8} {'vs compile':>10} | {'TFLOP/s':>7} {'GB/s':>6} | tol used (starter)")
    tflops = f"{row['starter_tflops']:7.1f}" if row.get("starter_tflops") else "      -"
    gbps = f"{row['starter_gbps']:6.0f}" if row.get("starter_gbps") else "     -"
    return (f"{row['M']:>5} {row['N']:>5} {row['K']:>5} | {us('starter_us'):>10} {us('eager_us')} "
            f"{us('compile_us'):>10} | {ratio('vs_eager'):>8} {ratio('vs_compile'):>10} | {tflops} {gbps} | "
            f"{row['starter_tolerance_used']:.3f}")

