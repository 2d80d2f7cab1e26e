"""Measure every starter against PyTorch eager, torch.compile, Liger-Kernel and the hardware limit, in one run.

    python benchmarks/compare.py [--types rmsnorm,matmul] [--dtypes float16,bfloat16] [--out benchmarks/results]

The limits come first, measured in the same process on the same GPU: device-to-device copy
bandwidth (bytes read plus bytes written) for memory-bound kernels, cuBLAS for matrix products.
Then, for each kernel type at the public paper's size, every implementation is timed with
triton.testing.do_bench (median, L2 flushed) on the same random inputs, and its output is checked
against the reference so that a fast wrong answer cannot top the table.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
from pathlib import Path

import torch
import triton
import triton.testing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autokernel import registry  # noqa: E402
from autokernel.paths import starter_path  # noqa: E402

# The public paper's sizes, and the target ratio for our starter (against the copy limit for
# memory-bound kernels, against the named peer for compute-bound ones).
TARGETS = {
    "rmsnorm": ({"M": 8192, "N": 8192}, "copy", 0.92),
    "softmax": ({"M": 8192, "N": 8192}, "copy", 0.90),
    "layernorm": ({"M": 8192, "N": 4096}, "copy", 0.90),
    "cross_entropy": ({"M": 8192, "V": 32768}, "copy", 0.85),
    "rotary_embedding": ({"B": 4, "H": 32, "S": 2048, "D": 128}, "copy", 0.85),
    "reduce": ({"M": 8192, "N": 8192, "dim": -1, "op": "sum"}, "copy", 0.90),
    "matmul": ({"M": 4096, "N": 4096, "K": 4096}, "cublas", 0.90),
    "flash_attention": ({"B": 4, "H": 32, "S": 2048, "D": 128, "causal": 1}, "sdpa", 0.90),
    "fused_mlp": ({"M": 4096, "D": 4096, "F": 11008, "act": "silu"}, "torch.compile", 1.0),
}
EXTRA_SHAPES = {"matmul": [{"M": 8192, "N": 8192, "K": 8192}]}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def median_ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_bandwidth_gbs() -> float:
    src = torch.randn(2**28, device="cuda", dtype=torch.float32)   # 1 GiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9


def cublas_tflops(shape: dict, dtype: torch.dtype) -> float:
    a = torch.randn(shape["M"], shape["K"], device="cuda", dtype=dtype)
    b = torch.randn(shape["K"], shape["N"], device="cuda", dtype=dtype)
    ms = median_ms(lambda: a @ b)
    return 2 * shape["M"] * shape["N"] * shape["K"] / (ms / 1e3) / 1e12


def load_starter(kernel_type: str):
    spec = importlib.util.spec_from_file_location(f"starter_{kernel_type}", starter_path(kernel_type))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel_fn


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


def peers(kernel_type: str, kt: registry.KernelType) -> dict:
    impls = {"eager": kt.reference, "torch.compile": torch.compile(kt.reference)}
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


def measure(kernel_type: str, shape: dict, dtype: torch.dtype, limits: dict) -> list[dict]:
    kt = registry.get(kernel_type)
    inputs = kt.inputs(shape, dtype, seed=1234, device="cuda")
    expected = kt.reference(**inputs)
    bytes_moved = kt.bytes_moved(shape, registry.dtype_size(dtype))
    flops = kt.flops(shape)
    compute_bound = TARGETS[kernel_type][1] != "copy"
    rows = []
    for name, fn in peers(kernel_type, kt).items():
        try:
            error = max_rel_error(fn(**inputs), expected)
            ms = median_ms(lambda: fn(**inputs))
        except Exception as exc:
            print(f"{kernel_type} {name}: failed ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        rate = flops / (ms / 1e3) / 1e12 if compute_bound else bytes_moved / (ms / 1e3) / 1e9
        limit = limits["cublas"][(registry.format_shape(shape), dtype)] if kernel_type == "matmul" else \
            None if compute_bound else limits["copy"]
        rows.append({"kernel": kernel_type, "shape": registry.format_shape(shape), "dtype": str(dtype)[6:],
                     "impl": name, "latency_us": ms * 1e3, "rate": rate, "unit": "TFLOP/s" if compute_bound else "GB/s",
                     "fraction_of_limit": rate / limit if limit else None, "max_rel_error": error})
    best_peer = min((r["latency_us"] for r in rows if r["impl"] != "ours"), default=None)
    for r in rows:
        r["ratio_to_best_peer"] = best_peer / r["latency_us"] if best_peer else None
    return rows


def target_verdict(kernel_type: str, rows: list[dict]) -> str:
    _, against, target = TARGETS[kernel_type]
    ours = next((r for r in rows if r["impl"] == "ours"), None)
    if ours is None:
        return "ours failed"
    if against == "copy" or against == "cublas":
        value = ours["fraction_of_limit"]
        return f"{value:.2f} of {against} (target {target}) {'MET' if value >= target else 'MISSED'}"
    peer = next((r for r in rows if r["impl"] == against), None)
    if peer is None:
        return f"no {against} to compare"
    ratio = peer["latency_us"] / ours["latency_us"]
    return f"{ratio:.2f}x {against} (target {target}) {'MET' if ratio >= target else 'MISSED'}"


def fmt(value, spec) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default=",".join(TARGETS))
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("compare.py needs a GPU: it measures against the hardware's limits")
    types = args.types.split(",")
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    limits = {"copy": copy_bandwidth_gbs(), "cublas": {}}
    for kernel_type in types:
        for shape in [TARGETS[kernel_type][0]] + EXTRA_SHAPES.get(kernel_type, []):
            for dtype in dtypes:
                if kernel_type == "matmul":
                    limits["cublas"][(registry.format_shape(shape), dtype)] = cublas_tflops(shape, dtype)
    device = torch.cuda.get_device_name()
    lines = [f"# Starters vs eager, torch.compile, Liger-Kernel and the hardware limit: {device}", "",
             f"date {datetime.date.today()}, torch {torch.__version__}, triton {triton.__version__}. "
             f"Median of do_bench, L2 flushed. Copy bandwidth (read + write): {limits['copy']:.0f} GB/s.",
             "", "| kernel | shape | dtype | impl | latency us | throughput | of limit | vs best peer | max rel err |",
             "|---|---|---|---|---|---|---|---|---|"]
    verdicts, records = [], []
    for kernel_type in types:
        for shape in [TARGETS[kernel_type][0]] + EXTRA_SHAPES.get(kernel_type, []):
            for dtype in dtypes:
                rows = measure(kernel_type, shape, dtype, limits)
                records += rows
                for r in rows:
                    lines.append(f"| {r['kernel']} | {r['shape']} | {r['dtype']} | {r['impl']} | {r['latency_us']:.1f} | "
                                 f"{r['rate']:.1f} {r['unit']} | {fmt(r['fraction_of_limit'], '.2f')} | "
                                 f"{fmt(r['ratio_to_best_peer'], '.2f')} | {r['max_rel_error']:.1e} |")
                    print(lines[-1], flush=True)
                verdicts.append(f"- {kernel_type} {registry.format_shape(shape)} {str(dtype)[6:]}: "
                                f"{target_verdict(kernel_type, rows)}")
                print(verdicts[-1], flush=True)
    cublas = ", ".join(f"{s} {str(d)[6:]} {v:.0f} TFLOP/s" for (s, d), v in limits["cublas"].items())
    lines += ["", f"cuBLAS: {cublas or 'not measured'}", "", "## Targets", ""] + verdicts
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{datetime.date.today()}_{device.replace(' ', '-')}_compare"
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (out_dir / f"{stem}.json").write_text(json.dumps({"device": device, "torch": torch.__version__,
                                                      "triton": triton.__version__, "copy_gbs": limits["copy"],
                                                      "rows": records}, indent=1))
    print(f"wrote {out_dir / stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
