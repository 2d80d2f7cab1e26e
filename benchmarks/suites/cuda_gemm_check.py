"""The CUDA GEMM starter on a GPU: right at every tile edge, and its speed against cuBLAS and the Triton starter.

    python benchmarks/cuda_check.py gemm [--out gemm.json] [--time-limit 420]

1. Builds kernels/cuda/matmul.py through autokernel/judge/cuda_build.py (on an sm_90 GPU with its sm_90a
   flags: the wgmma + TMA kernel) and names the kernels a float16 call launches (torch.profiler).
2. EDGE_SHAPES, small shapes that cut the tiles at every edge (M, N and K off the tile, K under one
   K step, a B tile whose last boxes lie wholly past N, more tiles than SMs so the persistent blocks
   wrap the pipeline across tiles), plus a transposed and a broadcast operand, in float16, bfloat16
   and float32: each output compared with the reference under the judge's own rule
   (autokernel/judge/correctness.py: the dtype's tolerance, against a float32 or float64 oracle).
3. GEMM_SHAPES (those of benchmarks/cuda_check.py backend) in the three dtypes: the same check, then
   triton.testing.do_bench (median, L2 flushed between calls) of the CUDA starter, the Triton starter
   (kernels/matmul.py) and cuBLAS (torch.matmul); "of cuBLAS" is cuBLAS's time over the starter's.
Everything runs in a child process under --time-limit seconds: a deadlocked pipeline (an mbarrier
that never completes) would otherwise hang the GPU; the last line printed then says where it stopped.
Exit code 1 when an output is wrong, a kernel fails, or the time limit is reached.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT, do_bench_us, load_module as load, run_info, write_json

EDGE_SHAPES = [(1, 1, 1), (7, 13, 5), (64, 64, 64), (128, 256, 64), (129, 257, 65), (300, 200, 100),
               (256, 384, 1000), (1000, 2949, 77), (517, 1031, 4099), (4096, 4096, 320)]
GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 1024, 4096), (8205, 2949, 5921)]
DTYPES = ("float16", "bfloat16", "float32")


def checked(fn, a, b) -> tuple[str, float]:
    """("ok" or what is wrong, the share of the tolerance used) for fn(a, b) under the judge's rule."""
    from autokernel.judge import correctness
    from autokernel.kernel_types import registry

    expected, oracle, allowance = correctness.reference_outputs(registry.get("matmul"), {"a": a, "b": b}, a.dtype)
    try:
        out = fn(a, b)
        correctness.compare(out, expected, oracle, a.dtype, allowance=allowance)
    except Exception as error:     # a CheckFailure, or the kernel's own error: reported, the run goes on
        return f"WRONG: {type(error).__name__}: {str(error)[:300]}", float("inf")
    return "ok", correctness.tolerance_used(out, expected, oracle, a.dtype)


def launched_kernels(fn) -> list[str]:
    """The names of the GPU kernels one float16 1024^3 call of fn runs."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from autokernel.judge.cuda_launches import is_kernel_event

    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(a, a)
        torch.cuda.synchronize()
    return sorted({e.name() for e in prof.profiler.kineto_results.events() if is_kernel_event(e)})


def edge_checks(cuda_fn) -> list[dict]:
    import torch

    rows = []
    for M, N, K in EDGE_SHAPES:
        for dtype in DTYPES:
            gen = torch.Generator("cuda").manual_seed(M * 7 + N * 13 + K)
            a = torch.randn((M, K), generator=gen, device="cuda").to(getattr(torch, dtype))
            b = torch.randn((K, N), generator=gen, device="cuda").to(getattr(torch, dtype))
            status, used = checked(cuda_fn, a, b)
            rows.append({"shape": f"{M}x{N}x{K}", "dtype": dtype, "status": status, "tolerance_used": used})
            print(f"edge   {M}x{N}x{K:<16} {dtype:<9} {status} ({used:.2f} of the tolerance)", flush=True)
    # Operands as views: a transposed one (copied to padded rows) and a broadcast one (row step 0: mma.sync).
    for label, make in [("a transposed", lambda a, b: (a.t().contiguous().t(), b)),
                        ("b broadcast", lambda a, b: (a, b[:1].expand_as(b)))]:
        for dtype in DTYPES:
            gen = torch.Generator("cuda").manual_seed(5)
            a = torch.randn((333, 520), generator=gen, device="cuda").to(getattr(torch, dtype))
            b = torch.randn((520, 700), generator=gen, device="cuda").to(getattr(torch, dtype))
            status, used = checked(cuda_fn, *make(a, b))
            rows.append({"shape": f"333x700x520 {label}", "dtype": dtype, "status": status, "tolerance_used": used})
            print(f"edge   333x700x520 {label:<12} {dtype:<9} {status} ({used:.2f} of the tolerance)", flush=True)
    return rows


def timed(cuda_fn, triton_fn) -> list[dict]:
    import torch

    median_us = do_bench_us
    rows = []
    print(f"\n{'M x N x K':<18} {'dtype':<9} {'CUDA':>7} {'Triton':>7} {'cuBLAS':>7}  TFLOP/s   "
          f"{'CUDA/cuBLAS':>11} {'Triton/cuBLAS':>13}  check", flush=True)
    for M, N, K in GEMM_SHAPES:
        for dtype in DTYPES:
            gen = torch.Generator("cuda").manual_seed(0)
            a = torch.randn((M, K), generator=gen, device="cuda").to(getattr(torch, dtype))
            b = torch.randn((K, N), generator=gen, device="cuda").to(getattr(torch, dtype))
            status, used = checked(cuda_fn, a, b)
            times = {"cuda": median_us(lambda: cuda_fn(a, b)), "triton": median_us(lambda: triton_fn(a, b)),
                     "cublas": median_us(lambda: torch.matmul(a, b))}
            tflops = {name: 2 * M * N * K / us / 1e6 for name, us in times.items()}
            row = {"shape": f"{M}x{N}x{K}", "dtype": dtype, "fp32_precision": torch.get_float32_matmul_precision(),
                   **{f"{k}_us": round(v, 1) for k, v in times.items()},
                   **{f"{k}_tflops": round(v, 1) for k, v in tflops.items()},
                   "cuda_of_cublas": round(times["cublas"] / times["cuda"], 3),
                   "triton_of_cublas": round(times["cublas"] / times["triton"], 3),
                   "status": status, "tolerance_used": used}
            rows.append(row)
            print(f"{row['shape']:<18} {dtype:<9} {tflops['cuda']:7.1f} {tflops['triton']:7.1f} {tflops['cublas']:7.1f}"
                  f"  TFLOP/s   {row['cuda_of_cublas']:11.2f} {row['triton_of_cublas']:13.2f}  {status} "
                  f"({used:.2f} of the tolerance)", flush=True)
    return rows


def run_checks(out: Path | None) -> int:
    import torch

    from autokernel.judge import cuda_build

    if not torch.cuda.is_available():
        sys.exit("cuda_gemm_check: torch sees no GPU")
    began = time.monotonic()
    flags = cuda_build.sm90a_flags()
    print(f"cuda_gemm_check on {torch.cuda.get_device_name()} (sm {torch.cuda.get_device_capability()}), torch "
          f"{torch.__version__} (CUDA {torch.version.cuda}); build flags {flags or 'torch defaults'}", flush=True)
    cuda_fn = load(ROOT / "kernels" / "cuda" / "matmul.py", "cuda_matmul").kernel_fn
    print(f"built (or found built) in {time.monotonic() - began:.1f} s; a float16 call launches "
          f"{launched_kernels(cuda_fn)}", flush=True)
    report = {**run_info().as_dict(), "cuda": torch.version.cuda, "flags": flags, "edges": edge_checks(cuda_fn)}
    triton_fn = load(ROOT / "kernels" / "matmul.py", "triton_matmul").kernel_fn
    report["timings"] = timed(cuda_fn, triton_fn)
    report["seconds"] = round(time.monotonic() - began, 1)
    report["ok"] = all(row["status"] == "ok" for row in report["edges"] + report["timings"])
    if out:
        write_json(out, report)
    print(f"\n{'all outputs right' if report['ok'] else 'SOME OUTPUTS WRONG'} in {report['seconds']} s", flush=True)
    return 0 if report["ok"] else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--time-limit", type=float, default=420, help="seconds before the child is stopped")
    parser.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    if args.in_child:
        return run_checks(args.out)
    command = [sys.executable, str(ROOT / "benchmarks" / "cuda_check.py"), "gemm", "--in-child",
               *(["--out", str(args.out)] if args.out else [])]
    child = subprocess.Popen(command, cwd=ROOT)
    try:
        return child.wait(timeout=args.time_limit)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        print(f"cuda_gemm_check: STOPPED after {args.time_limit:.0f} s (a hang?): the last line above is the last "
              "check that finished", flush=True)
        return 1

