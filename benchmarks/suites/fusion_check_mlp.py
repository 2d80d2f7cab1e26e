"""Does folding RMSNorm into the gated MLP pay? The rmsnorm_mlp starter against PyTorch and the unfused starters.

    python benchmarks/kernels.py fusion-check-mlp [--tokens 1,16,512,4096] [--dim 2048] [--hidden 5632]
                                          [--dtype float16] [--act silu] [--out FILE.json]

At the LLaMA-style sizes (D=2048, F=5632) from one decode token to a long prefill, each of these
computes fused_mlp(rmsnorm(x, g, eps), ...) on the same inputs:
  - ours: kernels/rmsnorm_mlp.py (the norm folded into the gate/up GEMMs: three launches);
  - unfused starters: kernels/rmsnorm.py, then kernels/fused_mlp.py (four launches, the
    normalized x written and read back): what the fold itself saves;
  - eager: reference.rmsnorm_mlp in PyTorch;
  - torch.compile: the same reference compiled (Inductor fuses the norm's pointwise work, but
    not the reduction into the cuBLAS GEMMs).
Each is timed with triton.testing.do_bench (median, L2 flushed) and its output checked against
the float32 oracle under the judge's own tolerance rule (autokernel.judge.correctness.tolerance_used:
1.0 is the limit), so a fast wrong answer cannot top the table. Prints a table; writes JSON to
--out, else to $OUT/fusion_check_mlp.json when $OUT is set. On a machine without a GPU it runs
through Triton's interpreter at whatever sizes it is given, with timings that mean nothing (the
JSON says so): that is for testing the script, not for numbers.
"""

from __future__ import annotations

import argparse
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import reference  # noqa: E402
from autokernel.core.dtypes import DTYPES  # noqa: E402
from autokernel.core.paths import starter_path  # noqa: E402
from autokernel.judge.candidate.worker import load_kernel  # noqa: E402
from autokernel.judge.correctness import tolerance_used  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from benchmarks.common import env_out, run_info, timer_ms, write_json  # noqa: E402

IMPLEMENTATIONS = ("ours", "unfused starters", "eager", "torch.compile")


def median_ms(fn, on_gpu: bool) -> float:
    return timer_ms(on_gpu, cpu_calls=3)(fn)


def implementations(inputs: dict) -> dict:
    """name -> a call of it on `inputs`."""
    ours, _ = load_kernel(starter_path("rmsnorm_mlp"))
    norm, _ = load_kernel(starter_path("rmsnorm"))
    mlp, _ = load_kernel(starter_path("fused_mlp"))
    weights = (inputs["w_gate"], inputs["w_up"], inputs["w_down"], inputs["activation"])
    compiled = torch.compile(reference.rmsnorm_mlp, dynamic=False)
    return {
        "ours": lambda: ours.kernel_fn(**inputs),
        "unfused starters": lambda: mlp.kernel_fn(norm.kernel_fn(inputs["x"], inputs["norm_weight"], inputs["eps"]),
                                                  *weights),
        "eager": lambda: reference.rmsnorm_mlp(**inputs),
        "torch.compile": lambda: compiled(**inputs),
    }


def check_shape(shape: dict, dtype: torch.dtype, device: str) -> dict:
    kt = registry.get("rmsnorm_mlp")
    inputs = kt.inputs(shape, dtype, seed=1234, device=device)
    upcast = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    oracle = kt.reference(**upcast)
    expected = kt.reference(**inputs)
    row = {"shape": registry.format_shape(shape), "ms": {}, "tolerance_used": {}}
    for name, call in implementations(inputs).items():
        output = call()       # also the compile / JIT warm-up, outside the timing
        row["tolerance_used"][name] = tolerance_used(output, expected, oracle, dtype)
        row["ms"][name] = median_ms(call, device == "cuda")
    ms = row["ms"]
    row["ours_vs_compile"] = ms["torch.compile"] / ms["ours"]
    row["ours_vs_best_pytorch"] = min(ms["eager"], ms["torch.compile"]) / ms["ours"]
    row["ours_vs_unfused_starters"] = ms["unfused starters"] / ms["ours"]
    return row


def table(rows: list[dict]) -> str:
    header = ("| shape | " + " | ".join(f"{name} (us)" for name in IMPLEMENTATIONS)
              + " | ours vs compile | ours vs unfused | worst tolerance used |")
    lines = [header, "|" + "---|" * (len(IMPLEMENTATIONS) + 4)]
    for row in rows:
        times = " | ".join(f"{row['ms'][name] * 1e3:.1f}" for name in IMPLEMENTATIONS)
        worst = max(row["tolerance_used"].values())
        lines.append(f"| {row['shape']} | {times} | {row['ours_vs_compile']:.2f}x | "
                     f"{row['ours_vs_unfused_starters']:.2f}x | {worst:.2f} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", default="1,16,512,4096", help="values of M, comma-separated")
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=5632)
    parser.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    parser.add_argument("--act", default="silu", choices=["silu", "gelu", "relu2"])
    parser.add_argument("--out", help="JSON file (default: $OUT/fusion_check_mlp.json when $OUT is set)")


def main(args: argparse.Namespace) -> int:
    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    dtype = DTYPES[args.dtype]
    info = run_info("CPU, Triton interpreter: timings mean nothing")
    where = info.device
    print(f"rmsnorm_mlp fusion check on {where}: D={args.dim}, F={args.hidden}, {args.dtype}, {args.act}", flush=True)
    rows = []
    for tokens in (int(m) for m in args.tokens.split(",")):
        shape = {"M": tokens, "D": args.dim, "F": args.hidden, "act": args.act}
        rows.append(check_shape(shape, dtype, device))
        print(f"  {rows[-1]['shape']}: done", flush=True)
    print(table(rows))
    failed = [row["shape"] for row in rows if max(row["tolerance_used"].values()) > 1.0]
    if failed:
        print(f"OUTPUT CHECK FAILED (tolerance used above 1.0) at {', '.join(failed)}")
    out = env_out("fusion_check_mlp.json", args.out)
    if out:
        write_json(out, {**info.as_dict(), "timings_meaningful": on_gpu, "dtype": args.dtype, "rows": rows})
        print(f"wrote {out}")
    return 1 if failed else 0

