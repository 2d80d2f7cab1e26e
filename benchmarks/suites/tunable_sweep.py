"""A starter's tunables at a model's shapes, on a GPU: which settings beat its defaults, and by how much.

    python benchmarks/tunable_sweep.py rmsnorm_linear --shape M=4096,N=2048,K=2048 \
        --try large_BLOCK_N=256 --try large_stages=4,large_warps=8 [--dtype float16] [--out DIR]

For every shape: the starter with its defaults, then with each --try applied on top of them,
each checked against the reference (a wrong setting is reported, not timed) and timed with
triton.testing.do_bench (median, L2 flushed), beside PyTorch eager and torch.compile of the
reference. Written for the notes of what was tried: the starters' defaults change only where
this shows a setting faster at the shapes the models call.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from autokernel.core.dtypes import DTYPES  # noqa: E402
from autokernel.core.paths import starter_path  # noqa: E402
from autokernel.judge.candidate.worker import load_kernel  # noqa: E402
from autokernel.judge.correctness import CheckFailure, compare_outputs, output_parts, reference_outputs  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402


def parse_overrides(text: str) -> dict:
    """'large_BLOCK_N=256,pad_unaligned=False' -> {'large_BLOCK_N': 256, 'pad_unaligned': False}."""
    booleans = {"True": True, "False": False}
    return {name: booleans.get(value, value) if isinstance(value, str) else value
            for name, value in registry.parse_shape(text).items()}


def time_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def sweep(kernel_type: str, shapes: list[dict], tries: list[dict], dtype: torch.dtype,
          device: str = "cuda", timer=time_us) -> list[dict]:
    module, kt = load_kernel(starter_path(kernel_type))
    defaults = dict(module.TUNABLES)
    compiled = torch.compile(kt.reference, dynamic=False)
    rows = []
    for shape in shapes:
        inputs = kt.inputs(shape, dtype, seed=0, device=device)
        expected, oracle, allowance = reference_outputs(kt, inputs, dtype)
        row = {"shape": registry.format_shape(shape), "eager_us": timer(lambda: kt.reference(**inputs)),
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel_type", choices=sorted(registry.REGISTRY))
    parser.add_argument("--shape", action="append", required=True, type=registry.parse_shape)
    parser.add_argument("--try", dest="tries", action="append", default=[], type=parse_overrides)
    parser.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    parser.add_argument("--out", help="folder for tunable_sweep_<type>.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("tunable_sweep needs a GPU: the CPU interpreter's timings mean nothing", file=sys.stderr)
        return 2
    torch._dynamo.config.cache_size_limit = 64
    rows = sweep(args.kernel_type, args.shape, args.tries, DTYPES[args.dtype])
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, {args.dtype}; "
          "do_bench median, L2 flushed")
    if args.out:
        out = Path(args.out) / f"tunable_sweep_{args.kernel_type}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                   "triton": triton.__version__, "dtype": args.dtype, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
