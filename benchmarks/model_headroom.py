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
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autokernel import latency  # noqa: E402
from autokernel.model_args import add_model_arguments, load_model_keywords  # noqa: E402
from autokernel.models import load_model  # noqa: E402

# Lower-case substrings of GPU kernel names, checked in this order.
GROUPS = (
    ("attention", ("flash", "fmha", "attention", "attn", "cudnn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "wgmma", "sm90_", "sm80_", "splitk", "ampere_")),
)
PROFILED_FORWARDS = 5


def kernel_group(name: str) -> str:
    """'gemm', 'attention' or 'other' for a GPU kernel's name."""
    lowered = name.lower()
    if lowered.startswith("triton"):        # Inductor's own kernels, whatever they fuse
        return "other"
    for group, needles in GROUPS:
        if any(needle in lowered for needle in needles):
            return group
    return "other"


def profile_groups(fn, forwards: int = PROFILED_FORWARDS) -> tuple[dict[str, float], list[tuple[str, float, int]]]:
    """GPU microseconds per forward in each group, and the top kernels (name, us per forward, calls)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            fn()
        torch.cuda.synchronize()
    per_kernel: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            per_kernel[event.name].append(event.device_time_total)
    groups = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    top = []
    for name, times in per_kernel.items():
        us = sum(times) / forwards
        groups[kernel_group(name)] += us
        top.append((name, us, len(times) // forwards))
    top.sort(key=lambda row: -row[1])
    return groups, top


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
        groups, top = profile_groups(compiled_fn)
    kernel_us = sum(groups.values())
    compile_us = times["compile"].us
    best_us = min(t.us for t in times.values())
    ceilings = {
        "everything but GEMMs free": best_us / groups["gemm"],
        "everything but GEMMs and attention free": best_us / (groups["gemm"] + groups["attention"]),
    }
    print(f"{loaded.name} {args.dtype} inputs {[tuple(t.shape) for t in inputs if hasattr(t, 'shape')]} "
          f"on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for mode, t in times.items():
        print(f"  {mode:24s} {t.median_ms:8.3f} ms  (range {t.low_ms:.3f}-{t.high_ms:.3f}, {t.repeats} repeats)")
    print(f"  compiled forward's GPU kernel time {kernel_us / 1e3:.3f} ms of {compile_us / 1e3:.3f} ms whole call")
    for group, us in groups.items():
        print(f"    {group:10s} {us / 1e3:8.3f} ms  {us / kernel_us:6.1%}")
    for what, ceiling in ceilings.items():
        print(f"  ceiling against PyTorch's best ({best_us / 1e3:.3f} ms) if {what}: {ceiling:.3f}x")
    print("  top kernels (us per forward, calls):")
    for name, us, calls in top[:12]:
        print(f"    {us:9.1f} {calls:4d}  [{kernel_group(name)}] {name[:110]}")
    if args.out:
        out = Path(args.out) / "headroom.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({
            "model": loaded.name, "model_args": args.model_arg, "dtype": args.dtype,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "times_ms": {mode: t.to_json() for mode, t in times.items()},
            "compiled_kernel_us": groups, "ceilings": ceilings,
            "top_kernels": [{"name": n, "us": us, "calls": c} for n, us, c in top[:40]]}, indent=2) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
