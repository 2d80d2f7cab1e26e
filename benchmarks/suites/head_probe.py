"""Probe: a language model's head, a 16-bit GEMM whose N is not a multiple of 8 (GPT-2: 512 x 768 @ 768 x 50257).

Question (issue 34's bar: GPT-2 fp16 at 1x512 faster than PyTorch's best). Session 12 saw our head at 178 us
against Inductor's 104 (H200). cuBLAS is slow on the unaligned N (2.84x our engine's time on an H100, 2026-11-27);
Inductor pads the weight to 50264 rows and calls cuBLAS. Hypothesis: the padding is a copy of the 77 MB weight on
every call (about 35 us of its 104 on an H200), so a weight padded once, or our engine reading the unaligned weight
by TMA (its rows are 768 elements: aligned) with a fast epilogue, beats it.

Prints per variant: median whole-call time (do_bench, L2 flushed, each call's own Python included), TFLOP/s and
max error against a float32 product; and Inductor's generated code for the head (to see where it pads).
Run: python benchmarks/kernels.py head-probe [--m 512 --n 50257 --k 768]
"""

import argparse
import importlib.util
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from autokernel.routing.manifest import write_manifest

ROOT = Path(__file__).resolve().parents[2]
PLANS = ("128x128x64/w8/s5/g8/k1/ws0", "128x256x64/w8/s3/g8/k1/ws0", "128x256x64/w8/s3/g8/k1/ws1",
         "256x128x64/w8/s3/g8/k1/ws0", "128x128x64/w8/s4/g8/k1/ws1")
PADDED_PLANS = PLANS[:2]


def _matmul_module():
    spec = importlib.util.spec_from_file_location("head_probe_matmul", ROOT / "kernels" / "matmul.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--n", type=int, default=50257)
    parser.add_argument("--k", type=int, default=768)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    parser.add_argument("--out", default=os.environ.get("OUT"), help="where Inductor's code for the head is written")
    parser.add_argument("--routed", action="store_true",
                        help="instead: the shipped GPT-2 with only its head routed to the matmul starter, under "
                             "torch.compile + CUDA graphs, against the same model unrouted; Inductor's code of both")
    parser.add_argument("--verify-timing", action="store_true",
                        help="instead: the same routed model timed as verify times it (variants.run: alone, and in "
                             "turn with the router bypassed), beside do_bench of the same compiled calls")
    parser.add_argument("--verify-flow", action="store_true",
                        help="instead: verify's whole comparison of the routed model, in this process")


def _gpt2_and_head_folder(block_shapes: bool = False):
    """The shipped GPT-2 module, its input, and a folder of kernels holding the matmul starter verified at the head's
    shape only (so only the head routes), or also at the blocks' four GEMM shapes (as verify --starters has it)."""
    import tempfile

    from autokernel.core.paths import MANIFEST_NAME, starter_path
    from autokernel.routing import plugin
    from benchmarks.common import load_module
    gpt2 = load_module(ROOT / "models" / "gpt2.py", "head_probe_gpt2", register=True)
    tokens = gpt2.get_inputs()[0].cuda()
    folder = Path(tempfile.mkdtemp())
    (folder / "1_matmul.py").write_text(starter_path("matmul").read_text())
    write_manifest(folder / MANIFEST_NAME, {"1_matmul": {
        "file": "1_matmul.py", "kernel_type": "matmul", "rank": 1, "dtypes": ["float16"],
        "shapes": [{"M": tokens.numel(), "N": n, "K": k} for n, k in
                   ([(50257, 768)] + ([(2304, 768), (768, 768), (3072, 768), (768, 3072)] if block_shapes else []))],
        "best_speedup_vs_pytorch": 1.0}})
    return gpt2, tokens, folder


def routed(args: argparse.Namespace) -> int:
    """Whole-model check of the head's route: the kernel wins alone (session 13: 82 us against Inductor's 104 in
    the compiled timing of its own shape) but the route lost end to end (0.972x on shipped GPT-2)."""
    from torch._inductor.utils import run_and_get_code

    from autokernel.routing import plugin
    gpt2, tokens, folder = _gpt2_and_head_folder()
    results = {}
    for name in ("unrouted", "routed"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = gpt2.get_model().cuda().half().eval()
        if name == "routed":
            plugin.plug_in(model, folder, policy="all")
            with torch.no_grad():
                model(tokens)       # the router decides on an eager call; a compiled graph takes that decision
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            compiled = torch.compile(model, mode=None if mode == "default" else mode)
            with torch.no_grad():
                out, code = run_and_get_code(compiled, tokens)
                out, code2 = run_and_get_code(compiled, tokens)
                strides, out = tuple(out.stride()), out.float()      # a CUDA graph's output is overwritten next run
                ms = triton.testing.do_bench(lambda: compiled(tokens), warmup=25, rep=300)
            results[(name, mode)] = (ms, out)
            print(f"  {name:9s} torch.compile {mode:16s} {ms * 1e3:8.1f} us  out strides {strides}")
            if args.out:
                Path(args.out, f"gpt2_{name}_{mode}.py").write_text("\n\n# ----\n".join(code + code2))
    ref = results[("unrouted", "default")][1]
    for key, (ms, out) in results.items():
        print(f"  {key}: max |out - unrouted default| {(out - ref).abs().max().item():.3e}")
    return 0


def verify_timing(args: argparse.Namespace) -> int:
    """Session 13: this probe timed the head's route at 1.032x (do_bench, each compiled model alone) where verify's
    selection timed it at 0.90x. Here the same plugged-in model is timed by verify's own code (variants.run): alone,
    and in turn with the router bypassed as the selection does, each beside do_bench of the same compiled call.
    Which of the two timings moves says whether the pairing (two CUDA-graph trees of one model, alternating) or
    the wall clock is what costs the route its win."""
    from autokernel.routing import plugin
    from autokernel.routing.decisions import ALL
    from autokernel.verify import variants
    gpt2, tokens, folder = _gpt2_and_head_folder()
    torch.manual_seed(0)
    model = gpt2.get_model().cuda().half().eval()
    with torch.no_grad():
        expected = model(tokens)

    def bench(call) -> None:
        bench.us = triton.testing.do_bench(call, warmup=25, rep=300) * 1e3
    bench.us = float("nan")

    def show(label: str, result) -> None:
        paired = f", PyTorch in turn {result.baseline.median_ms * 1e3:.1f} us" if result.baseline else ""
        print(f"  {label:44s} wall {result.ms * 1e3 if result.ms else float('nan'):8.1f} us{paired}; do_bench "
              f"{bench.us:8.1f} us; graphs {result.graphs} breaks {result.graph_breaks} failed {result.failed}",
              flush=True)
        bench.us = float("nan")

    for _ in range(2):      # twice: the order of the first runs is not what decides
        show("PyTorch: torch.compile + CUDA graphs", variants.run("cudagraphs", model, (tokens,), expected, True,
                                                                   after_timing=bench))
        plugged = plugin.plug_in(model, folder, policy=ALL)
        router = plugin.router_of(plugged)
        with torch.no_grad():
            plugged(tokens)     # the router decides on an eager call
        show("head routed, alone", variants.run("ours_cudagraphs", plugged, (tokens,), expected, True,
                                                after_timing=bench))
        with torch.no_grad():
            plugged(tokens)
        show("head routed, in turn with bypassed", variants.run(
            "ours_cudagraphs", plugged, (tokens,), expected, True, paired_with=router.bypassed, after_timing=bench))
        plugin.unplug(plugged)
    return 0


def verify_flow(args: argparse.Namespace) -> int:
    """verify's whole comparison (handover.compare: PyTorch's variants, the route table, the selection), in this
    process rather than verify's sandboxed child: --verify-timing timed the head's route at 1.03x with verify's
    timing code, verify itself at 0.90-0.98x. Once with the head's shape verified alone, once with the blocks'
    shapes verified too (routed only where the route table says so, as verify --starters has it)."""
    from autokernel.verify import handover
    for block_shapes in (False, True):
        gpt2, tokens, folder = _gpt2_and_head_folder(block_shapes)
        torch.manual_seed(0)
        model = gpt2.get_model().cuda().half().eval()
        print(f"== verified at the head{' and the blocks' if block_shapes else ''}", flush=True)
        compared, _ = handover.compare(model, (tokens,), folder, on_gpu=True,
                                       log=lambda line: print("  " + line, flush=True))
        for trial in compared.get("selection", []):
            print(f"  selection {trial['mode']} {trial['kernel']}: {trial['why']}", flush=True)
        print(f"  verdict: {compared['verdict']['summary']}", flush=True)
    return 0


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("head-probe needs a GPU")
        return 2
    if args.routed:
        return routed(args)
    if args.verify_timing:
        return verify_timing(args)
    if args.verify_flow:
        return verify_flow(args)
    mm = _matmul_module()
    dtype = getattr(torch, args.dtype)
    M, N, K = args.m, args.n, args.k
    pad_n = -(-N // 8) * 8
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=dtype)
    w = torch.randn(N, K, device="cuda", dtype=dtype) / K ** 0.5
    w_pad = torch.zeros(pad_n, K, device="cuda", dtype=dtype)
    w_pad[:N].copy_(w)
    ref = x.float() @ w.float().t()
    flop = 2 * M * N * K
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}: "
          f"{M} x {K} @ {K} x {N} {args.dtype} (padded N {pad_n})")

    compiled = torch.compile(lambda a, b: F.linear(a, b))
    graphs = torch.compile(lambda a, b: F.linear(a, b), mode="reduce-overhead")
    variants = {
        "eager F.linear (cuBLAS, unaligned N)": lambda: F.linear(x, w),
        "torch.compile F.linear": lambda: compiled(x, w),
        "torch.compile + CUDA graphs F.linear": lambda: graphs(x, w).clone(),
        "cuBLAS on a weight padded once, sliced view": lambda: F.linear(x, w_pad)[:, :N],
        "cuBLAS on a weight padded once, contiguous": lambda: F.linear(x, w_pad)[:, :N].contiguous(),
        "matmul.kernel_fn (today's route)": lambda: mm.kernel_fn(x, w.t()),
    }
    for text in PLANS:
        plan = mm.parse_engine_plan(text)
        variants[f"engine {text}"] = (lambda p: lambda: mm.engine_gemm(x, w.t(), plan=p))(plan)
    for text in PADDED_PLANS:
        variants[f"engine {text}, padded weight and out, view"] = \
            (lambda p: lambda: mm.engine_gemm(x, w_pad.t(), plan=p)[:, :N])(mm.parse_engine_plan(text))
    start = time.time()
    for name, fn in variants.items():
        try:
            out = fn()
            torch.cuda.synchronize()
            error = (out.float() - ref).abs().max().item()
            ms = triton.testing.do_bench(fn, warmup=25, rep=200)
            print(f"  {name:60s} {ms * 1e3:8.1f} us {flop / ms / 1e9:6.1f} TFLOP/s  max error {error:.2e}")
        except Exception as exc:  # a variant that does not compile or fit is a result too
            print(f"  {name:60s} {type(exc).__name__}: {str(exc).splitlines()[0][:140]}")
    print(f"({time.time() - start:.0f} s)")
    if args.out:
        from torch._inductor.utils import run_and_get_code
        torch._dynamo.reset()
        _, code = run_and_get_code(torch.compile(lambda a, b: F.linear(a, b)), x, w)
        Path(args.out, "head_inductor_code.py").write_text("\n\n# ----\n".join(code))
    return 0
