"""Time variants of starter kernels (any kernel file, any TUNABLES overrides) against the copy limit, in one run.

    python benchmarks/kernels.py tunables-plan PLAN.json [--out results.json]

PLAN.json is a list of variants: {"type": "rmsnorm", "file": "kernels/rmsnorm.py", "label": "...",
"tunables": {"TILE_ELEMS": 8192}, "dtypes": ["float16"]}; {"type": ..., "peers": true} times eager,
torch.compile and Liger for the type instead; {"probe": "read"} times a plain streaming read
of 1 GiB (the read side of the bandwidth limit, which read-only kernels like reduce are held to);
{"probe": "copy_sizes"} times device copies of 67 MB to 2 GB; {"probe": "mlp_split", "file": ...}
times the fused MLP starter's three launches apart, next to cuBLAS.
Each variant runs at compare's target shape on the same random inputs, is checked against the
reference (max relative error), timed with compare's do_bench median, and placed against the
device-to-device copy bandwidth measured in the same process (before and after, to see drift).
Compute-bound types print TFLOP/s instead. Each line also gives the registers, spills and warps of the Triton kernels the variant compiled,
for occupancy, and how many of their global loads and stores are 16 bytes wide.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from autokernel.kernel_types import registry
from benchmarks import common
from benchmarks.common import do_bench_ms, run_info, write_json
from benchmarks.suites import compare

MAX_ERROR = 3e-2   # a fast variant that is this wrong is reported, not ranked


@triton.jit
def _read_probe(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """Reads one BLOCK of x per program and writes its sum: nothing but streaming reads."""
    start = tl.program_id(0).to(tl.int64) * BLOCK
    x = tl.load(x_ptr + start + tl.arange(0, BLOCK), eviction_policy="evict_first")
    tl.store(out_ptr + tl.program_id(0), tl.sum(x.to(tl.float32), axis=0))


def read_probe(copy_gbs: float) -> None:
    """Print the read bandwidth of a 1 GiB streaming read for a few block shapes."""
    x = torch.randn(2**29, device="cuda", dtype=torch.float16)
    for block in (8192, 16384, 32768):
        out = torch.empty(x.numel() // block, device="cuda", dtype=torch.float32)
        for warps in (8, 16, 32):
            ms = do_bench_ms(lambda: _read_probe[(out.numel(),)](x, out, BLOCK=block, num_warps=warps))
            gbs = x.numel() * 2 / (ms / 1e3) / 1e9
            print(f"read probe BLOCK={block:6d} warps={warps:2d}  {gbs:7.0f} GB/s {gbs / copy_gbs:5.3f} of copy",
                  flush=True)


def copy_sizes(copy_gbs: float) -> None:
    """Print the bandwidth of do_bench device copies moving 67 MB to 2 GB: what each size can reach."""
    for moved_mb in (67, 134, 268, 537, 2147):
        src = torch.empty(moved_mb * 10**6 // 2, device="cuda", dtype=torch.uint8).random_()
        dst = torch.empty_like(src)
        ms = do_bench_ms(lambda: dst.copy_(src))
        gbs = 2 * src.numel() / (ms / 1e3) / 1e9
        print(f"copy moving {moved_mb:5d} MB  {ms * 1e3:8.1f} us {gbs:7.0f} GB/s {gbs / copy_gbs:5.3f} of the 1 GiB copy",
              flush=True)


def mlp_split(variant: dict, module_cache: dict) -> None:
    """Time the fused MLP starter's three launches apart, next to cuBLAS doing the same products."""
    module = load_module(variant["file"], module_cache)
    saved = dict(module.TUNABLES)
    module.TUNABLES.update(variant.get("tunables", {}))
    shape = compare.TARGETS["fused_mlp"][0]
    try:
        for dtype_name in variant.get("dtypes", ["float16"]):
            inputs = registry.get("fused_mlp").inputs(shape, compare.DTYPES[dtype_name], seed=1234, device="cuda")
            x, w_gate, w_up, w_down = (inputs[n] for n in ("x", "w_gate", "w_up", "w_down"))
            gate = module._gemm(x, w_gate)
            hidden = module._gemm(x, w_up, gate=gate)
            gemm_flop = 2 * x.shape[0] * w_gate.shape[0] * x.shape[1]
            parts = {"ours gate": lambda: module._gemm(x, w_gate), "cuBLAS x@Wg.T": lambda: x @ w_gate.T,
                     "ours up*act(g)": lambda: module._gemm(x, w_up, gate=gate),
                     "ours down": lambda: module._gemm(hidden, w_down), "cuBLAS h@Wd.T": lambda: hidden @ w_down.T}
            for name, fn in parts.items():
                ms = do_bench_ms(fn)
                print(f"mlp split {dtype_name:8s} {variant.get('label', '')[:30]:30s} {name:14s} {ms * 1e3:8.1f} us "
                      f"{gemm_flop / (ms / 1e3) / 1e12:6.1f} TFLOP/s", flush=True)
    finally:
        module.TUNABLES.clear()
        module.TUNABLES.update(saved)


def load_module(path: str, cache: dict):
    if path not in cache:
        cache[path] = common.load_module(path, f"variant_{len(cache)}")
    return cache[path]


def vector_accesses(ptx: str, op: str) -> str:
    """'wide/all' count of one global access kind in PTX: wide ones move 16 bytes per thread."""
    lines = [line for line in ptx.splitlines() if f"{op}.global" in line]
    return f"{sum('.v4.' in line for line in lines)}/{len(lines)}"


def compiled_kernels(module) -> dict:
    """{(kernel name, cache key): resources} for every Triton kernel the module has compiled: registers,
    spills, warps, and how many of its global loads and stores are 16-byte vectors."""
    found = {}
    for name, fn in vars(module).items():
        caches = getattr(fn, "device_caches", None)
        if caches is None:
            continue
        for per_device in caches.values():
            for key, kernel in per_device[0].items():
                regs, spills = getattr(kernel, "n_regs", "?"), getattr(kernel, "n_spills", "?")
                ptx = kernel.asm.get("ptx", "")
                found[(name, str(key))] = (f"{name}:{regs}r/{spills}s/{kernel.metadata.num_warps}w "
                                           f"ld{vector_accesses(ptx, 'ld')} st{vector_accesses(ptx, 'st')}")
    return found


def run_variant(variant: dict, inputs: dict, expected, module_cache: dict) -> list[tuple[str, float, float, str]]:
    """[(implementation, latency ms, max relative error, kernel resources)] for one variant."""
    kt = registry.get(variant["type"])
    if variant.get("peers"):
        impls = {name: fn for name, fn in compare.peers(variant["type"], kt).items() if name != "ours"}
        module = None
    else:
        module = load_module(variant["file"], module_cache)
        impls = {variant.get("label", variant["file"]): module.kernel_fn}
    results = []
    for name, fn in impls.items():
        saved = dict(module.TUNABLES) if module else None
        before = compiled_kernels(module) if module else {}
        try:
            if module:
                module.TUNABLES.update(variant.get("tunables", {}))
            error = compare.max_rel_error(fn(**inputs), expected)
            ms = do_bench_ms(lambda: fn(**inputs))
            new = [v for k, v in compiled_kernels(module).items() if k not in before] if module else []
            results.append((name, ms, error, " ".join(new)))
        except Exception as exc:  # a variant that fails to compile or run is reported and skipped
            print(f"  {name}: failed ({type(exc).__name__}: {str(exc)[:300]})", flush=True)
        finally:
            if module:
                module.TUNABLES.clear()
                module.TUNABLES.update(saved)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("plan")
    parser.add_argument("--out")


def main(args: argparse.Namespace) -> int:
    plan = json.loads(Path(args.plan).read_text())
    copy_before = compare.copy_bandwidth_gbs()
    print(f"copy bandwidth {copy_before:.0f} GB/s on {torch.cuda.get_device_name()}", flush=True)
    module_cache, inputs_cache, records = {}, {}, []
    for variant in plan:
        if variant.get("probe") == "read":
            read_probe(copy_before)
            continue
        if variant.get("probe") == "copy_sizes":
            copy_sizes(copy_before)
            continue
        if variant.get("probe") == "mlp_split":
            try:
                mlp_split(variant, module_cache)
            except Exception as exc:  # a variant that fails to compile or run is reported and skipped
                print(f"  mlp split {variant.get('label')}: failed ({type(exc).__name__}: {str(exc)[:300]})", flush=True)
            continue
        kt = registry.get(variant["type"])
        shape = compare.TARGETS[variant["type"]][0]
        for dtype_name in variant.get("dtypes", ["float16"]):
            dtype = compare.DTYPES[dtype_name]
            if (variant["type"], dtype) not in inputs_cache:
                inputs = kt.inputs(shape, dtype, seed=1234, device="cuda")
                inputs_cache[(variant["type"], dtype)] = (inputs, kt.reference(**inputs))
            inputs, expected = inputs_cache[(variant["type"], dtype)]
            bytes_moved = kt.bytes_moved(shape, registry.dtype_size(dtype))
            for name, ms, error, resources in run_variant(variant, inputs, expected, module_cache):
                gbs = bytes_moved / (ms / 1e3) / 1e9
                flag = "" if error < MAX_ERROR else "  WRONG"
                rate = f"{gbs:7.0f} GB/s {gbs / copy_before:5.3f} of copy" if compare.TARGETS[variant["type"]][1] == "copy" \
                    else f"{kt.flops(shape) / (ms / 1e3) / 1e12:6.1f} TFLOP/s"
                print(f"{variant['type']:16s} {dtype_name:8s} {name:40s} {ms * 1e3:8.1f} us {rate}  "
                      f"err {error:.1e}{flag}  {resources}", flush=True)
                records.append({"type": variant["type"], "dtype": dtype_name, "impl": name,
                                "tunables": variant.get("tunables", {}), "latency_us": ms * 1e3, "gbs": gbs,
                                "fraction_of_copy": gbs / copy_before, "max_rel_error": error,
                                "resources": resources})
    copy_after = compare.copy_bandwidth_gbs()
    print(f"copy bandwidth after: {copy_after:.0f} GB/s", flush=True)
    if args.out:
        write_json(args.out, {**run_info().as_dict(), "copy_gbs_before": copy_before, "copy_gbs_after": copy_after,
                              "records": records}, indent=1)
    return 0

