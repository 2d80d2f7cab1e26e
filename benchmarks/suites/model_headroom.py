"""How much faster than torch.compile can a model get? The ceiling, measured on a GPU.

    python benchmarks/model_headroom.py models/llama.py --model-arg batch=4 --model-arg seq=1024 \
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
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autokernel.profile.model_args import add_model_arguments, load_model_keywords  # noqa: E402
from autokernel.profile.models import load_model  # noqa: E402
from autokernel.verify import latency  # noqa: E402
from autokernel.verify.headroom import Headroom, group_times, kernel_group, profile_kernels  # noqa: E402


def top_kernels(kernel_us: dict[str, float], count: int = 12) -> list[tuple[str, float]]:
    return sorted(kernel_us.items(), key=lambda row: -row[1])[:count]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, with_device=False)
    parser.add_argument("--out", help="folder for headroom.json")
    args = parser.parse_args()
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
    print(f"{loaded.name} {args.dtype} inputs {[tuple(t.shape) for t in inputs if hasattr(t, 'shape')]} "
          f"on {torch.cuda.get_device_name()}, torch {torch.__version__}")
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
        out = Path(args.out) / "headroom.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "model": loaded.name, "model_args": args.model_arg, "dtype": args.dtype,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "times_ms": {mode: t.to_json() for mode, t in times.items()},
            "headroom": headroom.to_json(),
            "top_kernels": [{"name": n, "us": us} for n, us in top_kernels(kernel_us, 40)]}, indent=2) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
