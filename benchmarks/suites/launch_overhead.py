"""Where the host time of a kernel_fn call goes in the judge's worker: plain, and under each guard.

    python benchmarks/end_to_end.py launch-overhead [--kernel softmax] [--shape M=8192,N=8192]

Times the starter's kernel_fn host time (call to return, device idle before each call) and its
GPU time, as a plain call and with the worker's guards added one at a time: the launch counter,
the no-library-compute dispatch mode, and all of them with the audit hook. PyTorch eager's call
is timed the same way, for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from autokernel.core.paths import starter_path
from autokernel.judge.candidate import worker_guards as guards
from autokernel.judge.candidate.worker import load_kernel
from autokernel.judge.candidate.worker_tampering import refuse_introspection
from autokernel.judge.correctness import case_inputs
from autokernel.kernel_types import registry
from benchmarks.common import run_info


def host_and_gpu_us(fn, inputs, calls=100) -> tuple[float, float, float]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host, gpu = [], []
    for i in range(calls + 5):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        fn(**inputs)
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        if i >= 5:
            host.append((t1 - t0) * 1e6)
            gpu.append(start.elapsed_time(end) * 1e3)
    return statistics.median(host), statistics.median(gpu), min(host)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--shape", default="M=8192,N=8192")


def main(args: argparse.Namespace) -> None:
    kt = registry.get(args.kernel)
    shape = registry.parse_shape(args.shape)
    inputs = case_inputs(kt, {"shape": shape, "dtype": "float16", "seed": 1, "adversarial": None}, "cuda")
    module, _ = load_kernel(starter_path(args.kernel))
    fn = module.kernel_fn
    info = run_info()
    print(f"{info.device}, {info.versions()}, "
          f"{args.kernel} {args.shape} float16; median host us / median GPU us / min host us over 100 calls")
    print("pytorch eager  ", *(f"{v:8.1f}" for v in host_and_gpu_us(kt.pytorch, inputs)))
    print("plain          ", *(f"{v:8.1f}" for v in host_and_gpu_us(fn, inputs)))
    counter = guards.LaunchCounter(lambda: torch._C._cuda_getCurrentRawStream(0),
                                   torch.cuda.current_stream().cuda_stream).install()
    print("+launch counter", *(f"{v:8.1f}" for v in host_and_gpu_us(fn, inputs)))
    mode = guards.NoLibraryCompute("cuda", lambda: torch._C._cuda_getCurrentRawStream(0),
                                   torch.cuda.current_stream().cuda_stream)

    def guarded(**kw):
        with mode:
            return fn(**kw)
    print("+dispatch mode ", *(f"{v:8.1f}" for v in host_and_gpu_us(guarded, inputs)))
    print("guard cost ms (per call, per op):", guards.guard_cost_ms(mode, torch.device("cuda"), time.perf_counter))
    sys.addaudithook(refuse_introspection)
    print("+audit hook    ", *(f"{v:8.1f}" for v in host_and_gpu_us(guarded, inputs)))
    counter.uninstall()
    print("-launch counter", *(f"{v:8.1f}" for v in host_and_gpu_us(guarded, inputs)))

