"""How much faster than torch.compile can a model get? The ceiling, measured on a GPU.

    python benchmarks/end_to_end.py headroom models/llama.py --model-arg batch=4 --model-arg seq=1024 \
        [--dtype float16] [--out DIR]

1. Times one whole forward eager, under torch.compile, and under torch.compile + CUDA graphs
   (median of repeats, with their range).
2. Profiles compiled forwards and sorts their GPU kernel time into three groups by kernel name:
   matrix products (cuBLAS, CUTLASS, nvjet), attention (flash, cuDNN, memory-efficient), and the
   rest (Inductor's fused Triton kernels, copies, reductions).
3. Reports the ceilings: if every kernel outside the matrix products cost nothing, a compiled
   forward could be at most compile / GEMM time faster; keeping attention too, compile /
   (GEMM + attention).

Why: a kernel agent that cannot beat cuBLAS at a GEMM can only win in the rest. When the rest
is a few percent of the forward, no fusion or tuning outside the GEMMs can reach a 1.10x goal,
and the report should say so with this table rather than promise it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from autokernel.profile.model_args import add_model_arguments, load_model_keywords
from autokernel.profile.models import load_model
from autokernel.verify import latency
from autokernel.verify.headroom import Headroom, group_times, kernel_group, profile_kernels
from benchmarks.common import run_info, write_json


def top_kernels(kernel_us: dict[str, float], count: int = 12) -> list[tuple[str, float]]:
    return sorted(kernel_us.items(), key=lambda row: -row[1])[:count]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser, with_device=False)
    parser.add_argument("--out", help="folder for headroom.json")


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("model_headroom needs a GPU", file=sys.stderr)
        return 2
    args.dtype = args.dtype or "float16"
    loaded = load_model(**load_model_keywords(args), device="cuda")
    model, inputs = loaded.model, loaded.inputs
    compiled = torch.compile(model)
    with torch.no_grad():
        eager_fn = lambda: model(*inputs)              # noqa: E731
        compiled_fn = lambda: compiled(*inputs)        # noqa: E731
        times = {"eager": latency.wall_clock(eager_fn, True), "compile": latency.wall_clock(compiled_fn, True)}
        graphs = latency.graph_replay(compiled_fn)
        if graphs is not None:
            times["compile + CUDA graphs"] = graphs
        kernel_us = profile_kernels(compiled_fn)
    groups = group_times(kernel_us)
    best_ms = min(t.median_ms for t in times.values())
    headroom = Headroom(groups["gemm"], groups["attention"], groups["other"], best_ms)
    info = run_info()
    print(f"{loaded.name} {args.dtype} inputs {[tuple(t.shape) for t in inputs if hasattr(t, 'shape')]} "
          f"on {info.device}, torch {info.torch}")
    for mode, t in times.items():
        print(f"  {mode:24s} {t.median_ms:8.3f} ms  (range {t.low_ms:.3f}-{t.high_ms:.3f}, {t.repeats} repeats)")
    total_us = sum(groups.values())
    print(f"  compiled forward's GPU kernel time {total_us / 1e3:.3f} ms of {times['compile'].median_ms:.3f} ms")
    for group, us in groups.items():
        print(f"    {group:10s} {us / 1e3:8.3f} ms  {us / total_us:6.1%}")
    print(f"  {headroom.summary()}; keeping attention too: {headroom.ceiling(keep_attention=True):.3f}x")
    print("  top kernels (us per forward):")
    for name, us in top_kernels(kernel_us):
        print(f"    {us:9.1f}  [{kernel_group(name)}] {name[:110]}")
    if args.out:
        out = write_json(Path(args.out) / "headroom.json", {
            "model": loaded.name, "model_args": args.model_arg, "dtype": args.dtype, **info.as_dict(),
            "times_ms": {mode: t.to_json() for mode, t in times.items()},
            "headroom": headroom.to_json(),
            "top_kernels": [{"name": n, "us": us} for n, us in top_kernels(kernel_us, 40)]})
        print(f"wrote {out}")
    return 0

