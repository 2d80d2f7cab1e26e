"""A starter's tunables at a model's shapes, on a GPU: which settings beat its defaults, and by how much.

    python benchmarks/kernels.py tunable-sweep rmsnorm_linear --shape M=4096,N=2048,K=2048 \
        --try large_BLOCK_N=256 --try large_stages=4,large_warps=8 [--dtype float16] [--out DIR]

For every shape: the starter with its defaults, then with each --try applied on top of them,
each checked against the reference (a wrong setting is reported, not timed) and timed with
triton.testing.do_bench (median, L2 flushed), beside PyTorch eager and torch.compile of the
reference. Written for the notes of what was tried: the starters' defaults change only where
this shows a setting faster at the shapes the models call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from autokernel.core.dtypes import DTYPES
from autokernel.core.paths import starter_path
from autokernel.judge.candidate.worker import load_kernel
from autokernel.judge.correctness import CheckFailure, compare_outputs, output_parts, reference_outputs
from autokernel.kernel_types import registry
from benchmarks.common import do_bench_us, run_info, write_json


def parse_overrides(text: str) -> dict:
    """'large_BLOCK_N=256,pad_unaligned=False' -> {'large_BLOCK_N': 256, 'pad_unaligned': False}."""
    booleans = {"True": True, "False": False}
    return {name: booleans.get(value, value) if isinstance(value, str) else value
            for name, value in registry.parse_shape(text).items()}


def sweep(kernel_type: str, shapes: list[dict], tries: list[dict], dtype: torch.dtype,
          device: str = "cuda", timer=do_bench_us) -> list[dict]:
    module, kt = load_kernel(starter_path(kernel_type))
    defaults = dict(module.TUNABLES)
    compiled = torch.compile(kt.pytorch, dynamic=False)
    rows = []
    for shape in shapes:
        inputs = kt.inputs(shape, dtype, seed=0, device=device)
        expected, oracle, allowance = reference_outputs(kt, inputs, dtype)
        row = {"shape": registry.format_shape(shape), "eager_us": timer(lambda: kt.pytorch(**inputs)),
               "compile_us": timer(lambda: compiled(**inputs)), "settings": []}
        for overrides in [{}] + tries:
            _set_tunables(module, {**defaults, **overrides})
            setting = {"overrides": overrides}
            try:
                compare_outputs(output_parts(module.kernel_fn(**inputs)), expected, oracle, dtype, kt.tolerance_scale,
                                allowance=allowance)
                setting["us"] = timer(lambda: module.kernel_fn(**inputs))
            except CheckFailure as failure:
                setting["wrong"] = str(failure)[:200]
            except Exception as exc:        # a setting the kernel cannot compile or launch
                setting["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            row["settings"].append(setting)
            print(_line(row, setting), flush=True)
        rows.append(row)
    _set_tunables(module, defaults)
    return rows


def _set_tunables(module, tunables: dict) -> None:
    module.TUNABLES.clear()
    module.TUNABLES.update(tunables)
    # Starters that memoise a launch plan per shape (functools caches) must forget the old plans.
    for value in vars(module).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def _line(row: dict, setting: dict) -> str:
    name = ",".join(f"{k}={v}" for k, v in setting["overrides"].items()) or "defaults"
    if "us" not in setting:
        return f"{row['shape']:28s} {name:48s} {setting.get('wrong') or setting.get('error')}"
    default_us = row["settings"][0].get("us")
    vs_default = f"{default_us / setting['us']:5.2f}x defaults" if default_us else ""
    return (f"{row['shape']:28s} {name:48s} {setting['us']:9.1f} us  eager {row['eager_us']:8.1f}  "
            f"compile {row['compile_us']:8.1f}  vs compile {row['compile_us'] / setting['us']:5.2f}x  {vs_default}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel_type", choices=sorted(registry.REGISTRY))
    parser.add_argument("--shape", action="append", required=True, type=registry.parse_shape)
    parser.add_argument("--try", dest="tries", action="append", default=[], type=parse_overrides)
    parser.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    parser.add_argument("--out", help="folder for tunable_sweep_<type>.json")


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("kernels.py tunable-sweep needs a GPU: the CPU interpreter's timings mean nothing", file=sys.stderr)
        return 2
    torch._dynamo.config.cache_size_limit = 64
    rows = sweep(args.kernel_type, args.shape, args.tries, DTYPES[args.dtype])
    info = run_info()
    print(f"{info.device}, {info.versions()}, {args.dtype}; do_bench median, L2 flushed")
    if args.out:
        write_json(Path(args.out) / f"tunable_sweep_{args.kernel_type}.json",
                   {**info.as_dict(), "dtype": args.dtype, "rows": rows})
    return 0

