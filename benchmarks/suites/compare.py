"""Measure every starter against PyTorch eager, torch.compile, Liger-Kernel and the hardware limit, in one run.

    python benchmarks/kernels.py compare [--types rmsnorm,matmul] [--dtypes float16,bfloat16] [--repeats 3]
                                 [--out benchmarks/results]

The limits are measured in the same process on the same GPU: device-to-device copy bandwidth
(bytes read plus bytes written) for memory-bound kernels, first; cuBLAS for matrix products, as
eager's a @ b timed in the same repeats as ours.
Then, for each kernel type at the public paper's size, every implementation is timed with
triton.testing.do_bench (median, L2 flushed) on the same random inputs, and its output is checked
against the reference so that a fast wrong answer cannot top the table. This is repeated on
freshly allocated inputs and the median over repeats is reported, with the spread. Memory-bound
kernels are also placed against a copy moving the same number of bytes, timed the same way.
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks.common import RESULTS, dated_path, do_bench_ms, fmt, latency_stats, load_module, run_info, \
    table_header, write_json, write_text
from autokernel.core.paths import starter_path  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from autokernel.kernel_types.base import KernelType  # noqa: E402

# The public paper's sizes, and the target ratio for our starter (against the copy limit for
# memory-bound kernels, against the named peer for compute-bound ones).
TARGETS = {
    "rmsnorm": ({"M": 8192, "N": 8192}, "copy", 0.92),
    "softmax": ({"M": 8192, "N": 8192}, "copy", 0.90),
    "layernorm": ({"M": 8192, "N": 4096}, "copy", 0.90),
    "cross_entropy": ({"M": 8192, "V": 32768}, "copy", 0.85),
    "rotary_embedding": ({"B": 4, "H": 32, "S": 2048, "D": 128}, "copy", 0.85),
    "reduce": ({"O": 8192, "R": 8192, "I": 1, "op": "sum"}, "copy", 0.90),
    "matmul": ({"M": 4096, "N": 4096, "K": 4096}, "cublas", 0.90),
    "flash_attention": ({"B": 4, "H": 32, "S": 2048, "D": 128, "causal": 1}, "sdpa", 0.90),
    "fused_mlp": ({"M": 4096, "D": 4096, "F": 11008, "act": "silu"}, "torch.compile", 1.0),
}
# Head dim 1024 (KernelBench level 1's attention, and benchmarks/problems/sdpa_head_dim_1024.py): the starter keeps
# the scores in memory there (kernels/flash_attention.py), and PyTorch takes its memory-efficient kernel.
EXTRA_SHAPES = {"matmul": [{"M": 8192, "N": 8192, "K": 8192}],
                "flash_attention": [{"B": 2, "H": 8, "S": 512, "D": 1024, "causal": 0},
                                    {"B": 2, "H": 8, "S": 512, "D": 1024, "causal": 1},
                                    {"B": 32, "H": 32, "S": 512, "D": 1024, "causal": 0}]}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def copy_bandwidth_gbs() -> float:
    src = torch.randn(2**28, device="cuda", dtype=torch.float32)   # 1 GiB
    dst = torch.empty_like(src)
    ms = do_bench_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9


def same_size_copy_ms(bytes_moved: float) -> float:
    """A device-to-device copy reading plus writing bytes_moved: the limit at this size, where the
    1 GiB copy amortizes per-launch costs (launch latency, first DRAM round trip, the dirty L2
    lines do_bench's flush leaves) that a kernel of a few hundred MB cannot."""
    src = torch.empty(int(bytes_moved) // 2, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    return do_bench_ms(lambda: dst.copy_(src))


def load_starter(kernel_type: str):
    return load_module(starter_path(kernel_type), f"starter_{kernel_type}").kernel_fn


def liger_impl(kernel_type: str):
    """Liger-Kernel's forward for this type, adapted to the reference signature, or None."""
    try:
        if kernel_type == "rmsnorm":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            return lambda x, weight, eps: LigerRMSNormFunction.apply(x, weight, eps)
        if kernel_type == "layernorm":
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            return lambda x, weight, bias, eps: LigerLayerNormFunction.apply(x, weight, bias, eps)
        if kernel_type == "softmax":
            from liger_kernel.ops.softmax import LigerSoftmaxFunction
            return lambda x: LigerSoftmaxFunction.apply(x)
        if kernel_type == "cross_entropy":
            from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
            return lambda logits, targets: LigerCrossEntropyFunction.apply(logits, targets, None)[0]
        if kernel_type == "rotary_embedding":
            from liger_kernel.ops.rope import LigerRopeFunction

            # Liger rotates q and k together; k gets a single head so nearly all the work is x's.
            def rope(x, cos, sin):
                return LigerRopeFunction.apply(x, x[:, :1], cos, sin, None, 1, x.shape[-1])[0]
            return rope
    except Exception as exc:  # an import error means Liger is absent or incompatible here: say so in the table
        print(f"Liger {kernel_type}: unavailable ({type(exc).__name__}: {exc})")
    return None


def peers(kernel_type: str, kt: KernelType) -> dict:
    impls = {"eager": kt.pytorch, "torch.compile": torch.compile(kt.pytorch)}
    if kernel_type == "flash_attention":
        impls["sdpa"] = lambda q, k, v, causal, sm_scale: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=sm_scale)
    liger = liger_impl(kernel_type)
    if liger is not None:
        impls["liger"] = liger
    impls["ours"] = load_starter(kernel_type)
    return impls


def max_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6))


def measure(kernel_type: str, shape: dict, dtype: torch.dtype, limits: dict,
            repeats: int) -> tuple[list[dict], dict | None]:
    """Rows for every implementation, and the same-size copy (None for compute-bound kernels)."""
    kt = registry.get(kernel_type)
    bytes_moved = kt.bytes_moved(shape, registry.dtype_size(dtype))
    flops = kt.flops(shape)
    compute_bound = TARGETS[kernel_type][1] != "copy"
    impls = peers(kernel_type, kt)
    times, errors, copy_times = {name: [] for name in impls}, dict.fromkeys(impls, 0.0), []
    for r in range(repeats):
        # A whole measurement can run ~1.4x slow (peers with ours), following where the caching
        # allocator placed the buffers: a spacer of a different size each repeat moves them.
        spacer = torch.empty(r * 37 * 2**20 + 2**20, device="cuda", dtype=torch.uint8)
        inputs = kt.inputs(shape, dtype, seed=1234 + r, device="cuda")
        expected = kt.reference(**inputs)
        for name, fn in list(impls.items()):  # same order every repeat; one that fails is dropped
            try:
                errors[name] = max(errors[name], max_rel_error(fn(**inputs), expected))
                times[name].append(do_bench_ms(lambda: fn(**inputs)))
            except Exception as exc:
                print(f"{kernel_type} {name}: failed ({type(exc).__name__}: {str(exc)[:200]})")
                del impls[name]
        if not compute_bound:
            copy_times.append(same_size_copy_ms(bytes_moved))
        del spacer, inputs, expected
        torch.cuda.empty_cache()
    copy = None
    if not compute_bound:
        copy = {"bytes": bytes_moved, **latency_stats(copy_times)}
        copy["gbs"] = bytes_moved / copy["latency_us"] / 1e3
        copy["fraction_of_copy"] = copy["gbs"] / limits["copy"]
    rows = []
    stats = {name: latency_stats(times[name]) for name in impls}
    work, unit_scale = (flops, 1e12) if compute_bound else (bytes_moved, 1e9)
    rates = {name: work / (stats[name]["latency_us"] / 1e6) / unit_scale for name in impls}
    if kernel_type == "matmul":
        # The matmul limit is cuBLAS, which is what eager's a @ b runs, timed in the same repeats as
        # ours: a limit timed once beforehand on a cool GPU read up to 10% higher than the same
        # call a minute later (H200, 2026-11-22).
        limits["cublas"][(registry.format_shape(shape), dtype)] = rates["eager"]
    for name in impls:
        rate = rates[name]
        limit = limits["cublas"][(registry.format_shape(shape), dtype)] if kernel_type == "matmul" else \
            None if compute_bound else limits["copy"]
        rows.append({"kernel": kernel_type, "shape": registry.format_shape(shape), "dtype": str(dtype)[6:],
                     "impl": name, **stats[name], "rate": rate, "unit": "TFLOP/s" if compute_bound else "GB/s",
                     "fraction_of_limit": rate / limit if limit else None,
                     "of_same_size_copy": rate / copy["gbs"] if copy else None, "max_rel_error": errors[name]})
    best_peer = min((r["latency_us"] for r in rows if r["impl"] != "ours"), default=None)
    for r in rows:
        r["ratio_to_best_peer"] = best_peer / r["latency_us"] if best_peer else None
    return rows, copy


def target_verdict(kernel_type: str, rows: list[dict], copy: dict | None) -> str:
    _, against, target = TARGETS[kernel_type]
    ours = next((r for r in rows if r["impl"] == "ours"), None)
    if ours is None:
        return "ours failed"
    if against == "copy" or against == "cublas":
        value = ours["fraction_of_limit"]
        verdict = f"{value:.2f} of {against} (target {target}) {'MET' if value >= target else 'MISSED'}"
        if copy:  # the target stays against the 1 GiB copy; a same-size copy is what this size allows
            verdict += f"; {ours['of_same_size_copy']:.2f} of a same-size copy ({copy['gbs']:.0f} GB/s)"
        return verdict
    peer = next((r for r in rows if r["impl"] == against), None)
    if peer is None:
        return f"no {against} to compare"
    ratio = peer["latency_us"] / ours["latency_us"]
    return f"{ratio:.2f}x {against} (target {target}) {'MET' if ratio >= target else 'MISSED'}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--types", default=",".join(TARGETS))
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per implementation, each on fresh inputs")
    parser.add_argument("--out", default=str(RESULTS))


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        sys.exit("kernels.py compare needs a GPU: it measures against the hardware's limits")
    types = args.types.split(",")
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    limits = {"copy": copy_bandwidth_gbs(), "cublas": {}}
    info = run_info()
    lines = [f"# Starters vs eager, torch.compile, Liger-Kernel and the hardware limit: {info.device}", "",
             f"date {info.date}, {info.versions()}. "
             f"Median over {args.repeats} repeats, each on freshly allocated inputs, of the median of do_bench "
             f"(L2 flushed). Copy bandwidth (read + write, 1 GiB): {limits['copy']:.0f} GB/s.", "",
             *table_header(["kernel", "shape", "dtype", "impl", "latency us", "min–max us", "throughput", "of limit",
                            "of same-size copy", "vs best peer", "max rel err"])]
    verdicts, records, copies, copy_lines = [], [], {}, []
    for kernel_type in types:
        for shape in [TARGETS[kernel_type][0]] + EXTRA_SHAPES.get(kernel_type, []):
            for dtype in dtypes:
                rows, copy = measure(kernel_type, shape, dtype, limits, args.repeats)
                records += rows
                for r in rows:
                    lines.append(f"| {r['kernel']} | {r['shape']} | {r['dtype']} | {r['impl']} | {r['latency_us']:.1f} | "
                                 f"{r['latency_min_us']:.1f}–{r['latency_max_us']:.1f} | "
                                 f"{r['rate']:.1f} {r['unit']} | {fmt(r['fraction_of_limit'], '.2f')} | "
                                 f"{fmt(r['of_same_size_copy'], '.2f')} | "
                                 f"{fmt(r['ratio_to_best_peer'], '.2f')} | {r['max_rel_error']:.1e} |")
                    print(lines[-1], flush=True)
                key = f"{kernel_type} {registry.format_shape(shape)} {str(dtype)[6:]}"
                if copy:
                    copies[key] = copy
                    copy_lines.append(f"- same-size copy, {key}: {copy['bytes'] / 1e6:.1f} MB in "
                                      f"{copy['latency_us']:.1f} us ({copy['latency_min_us']:.1f}–"
                                      f"{copy['latency_max_us']:.1f}) = "
                                      f"{copy['gbs']:.0f} GB/s, {copy['fraction_of_copy']:.2f} of the 1 GiB copy")
                    print(copy_lines[-1], flush=True)
                verdicts.append(f"- {key}: {target_verdict(kernel_type, rows, copy)}")
                print(verdicts[-1], flush=True)
    cublas = ", ".join(f"{s} {str(d)[6:]} {v:.0f} TFLOP/s" for (s, d), v in limits["cublas"].items())
    lines += [""] + copy_lines + ["", f"cuBLAS: {cublas or 'not measured'}", "", "## Targets", ""] + verdicts
    stem = dated_path(args.out, info, "compare")
    write_text(f"{stem}.md", "\n".join(lines) + "\n")
    write_json(f"{stem}.json", {**info.as_dict(), "repeats": args.repeats, "copy_gbs": limits["copy"],
                                "same_size_copy": copies, "rows": records}, indent=1)
    print(f"wrote {stem}.md")
    return 0

