"""How many Triton kernels one full judge run compiles on a GPU, counted on the CPU: most of a job's baseline.

A job's baseline (two full bench.py runs, the first also compiling the reference with torch.compile)
took 110-170 s on an H100 for rmsnorm_mlp, most of it Triton compiling the kernel once per dtype,
plan and specialization met in the judge's stages (benchmarks/results/README.md). This replays every
case of bench.py's GPU stages (smoke, the GPU shape sweep in three dtypes plus the job's shapes,
the adversarial cases, determinism, the GPU edge shapes) through a kernel file's kernel_fn on the
CPU with every Triton launch recorded and not run, and counts the distinct compilations Triton's
cache would hold: the kernel, its constexprs, warps and stages, each tensor's dtype and 16-byte
alignment, each integer argument's specialization (== 1, divisible by 16) unless the kernel
declares it do_not_specialize, and each tensor descriptor's block. A file with the GEMM engine plans
as on an H100 (its engine_on_gpu and device figures replaced); other files plan as they do on the CPU.

    python benchmarks/end_to_end.py compile-count KERNEL_FILE [--type TYPE] [--shape M=4096,D=2048,F=5632,act=silu ...]
        [--dtype float16] [--one-dtype]
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

H100_SHARED_BYTES, H100_SMS = 232448, 132


def _argument_key(name: str, value, unspecialized: set) -> object:
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, TensorDescriptor):
        return ("desc", str(value.base.dtype), tuple(value.block_shape))
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return type(value).__name__
    if isinstance(value, int):
        return "int" if name in unspecialized else ("int", value == 1, value % 16 == 0)
    return type(value).__name__


def record_launches(keys: Counter):
    """Replace the interpreter's launch with one that records the compile key and runs nothing."""
    from triton.runtime.interpreter import InterpretedFunction

    def run(self, *args, grid, warmup, **kwargs):
        unspecialized = set(self.kwargs.get("do_not_specialize") or [])
        names = self.arg_names
        bound = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        constexprs = tuple(sorted((k, v) for k, v in kwargs.items() if k in names and k not in dict(zip(names, args))
                                  and not hasattr(v, "data_ptr") and not hasattr(v, "block_shape")))
        options = tuple(sorted((k, v) for k, v in kwargs.items() if k not in names))
        args_key = tuple(_argument_key(n, v, unspecialized) for n, v in bound.items() if (n, v) not in constexprs)
        keys[(self.fn.__name__, constexprs, options, args_key)] += 1
    InterpretedFunction.run = run


def cases(kt, job_shapes: list[dict], job_dtype, *, one_dtype: bool = False) -> list[tuple[dict, object, str | None]]:
    """(shape, dtype, adversarial name) of every check of a full judge run on a GPU, as bench.py makes them;
    one_dtype: its stages in the job's dtype alone, at every shape (what a baseline costs, judged with --one-dtype)."""
    from autokernel.core.dtypes import DTYPES
    dtypes = [job_dtype] if one_dtype else list(DTYPES.values())
    timing = job_shapes or [kt.timing_shape]
    found = [(kt.smoke_shape, job_dtype, None)] * 2
    found += [(shape, dtype, None) for dtype in dtypes for shape in kt.sweep]
    found += [(shape, job_dtype, None) for shape in job_shapes]
    found += [({**kt.smoke_shape, **adv.shape}, dtype, adv.name) for adv in kt.adversarial for dtype in dtypes]
    found += [(timing[0], job_dtype, None)]
    found += [(shape, dtype, None) for dtype in dtypes for shape in kt.edge_shapes]
    found += [(shape, job_dtype, None) for shape in timing]
    return found


def count(kernel_file: Path, kernel_type: str | None, job_shapes: list[dict], dtype_name: str, *,
          one_dtype: bool = False) -> Counter:
    import torch

    from autokernel.core.dtypes import DTYPES
    from autokernel.judge.candidate.worker import load_kernel
    from autokernel.judge.correctness import case_inputs
    from autokernel.kernel_types import registry
    keys: Counter = Counter()
    record_launches(keys)
    module, _ = load_kernel(kernel_file)
    if hasattr(module, "engine_on_gpu"):     # the GEMM engine: take a GPU's decisions on CPU tensors (an H100's)
        module.engine_on_gpu = lambda t: True
        module._engine_device = lambda index: (H100_SHARED_BYTES, H100_SMS, True)
        module.ENGINE_MIN_TILE = {"cuda": module.ENGINE_MIN_TILE["cuda"], "cpu": module.ENGINE_MIN_TILE["cuda"]}
    kt = registry.get(kernel_type or module.KERNEL_TYPE)
    for seed, (shape, dtype, adversarial) in enumerate(cases(kt, job_shapes, DTYPES[dtype_name], one_dtype=one_dtype)):
        case = {"shape": shape, "dtype": str(dtype).replace("torch.", ""), "seed": seed, "adversarial": adversarial}
        with torch.no_grad():
            module.kernel_fn(**case_inputs(kt, case, "cpu"))
    return keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--type", help="the kernel type (default: the file's KERNEL_TYPE)")
    parser.add_argument("--shape", action="append", default=[], help="a job shape, as bench.py takes it")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--one-dtype", action="store_true", help="the stages in --dtype alone, at every shape")


def main(args: argparse.Namespace) -> int:
    # The launches are caught before they run; planning is an H100's. Set when the subcommand runs (its kernels
    # are loaded after this), not when the module is imported, so that no other subcommand meets it.
    os.environ["TRITON_INTERPRET"] = "1"
    from autokernel.kernel_types import registry
    keys = count(args.kernel, args.type, [registry.parse_shape(s) for s in args.shape], args.dtype,
                 one_dtype=args.one_dtype)
    per_kernel = Counter(name for name, *_ in keys)
    run = f"a judge run in {args.dtype} alone" if args.one_dtype else "one full judge run"
    print(f"{args.kernel}: {len(keys)} compilations in {run} "
          f"({', '.join(f'{name} {n}' for name, n in per_kernel.most_common())}); {sum(keys.values())} launches")
    return 0

