"""What the router itself costs per routed call, free of kernel time and of a noisy machine's drift.

    python benchmarks/end_to_end.py router-glue [--calls 50000]

A linear layer is plugged in with a stand-in kernel that does no work (it returns a tensor made
beforehand), so every microsecond left is routing: the patched forward, the signature lookup, the
counters and the argument reshaping. Printed per call, host clock, median of 5 repeats:
  - nn.Linear unplugged (PyTorch's own call, for scale);
  - the same module whose forward is the route's launch, called directly (no router);
  - routed through the router (policy "all", the decision cached);
  - a torch call inside the function-routing mode against one outside it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from autokernel.core import interpreter

interpreter.choose()

import torch  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.routing import manifest, plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.routing.function_mode import FunctionRouting  # noqa: E402

NO_OP_KERNEL = '''"""A stand-in matmul that does no work: it returns a tensor made at import (router_glue.py)."""
import torch

KERNEL_TYPE = "matmul"
OUT = torch.zeros(8, 64, device="cuda" if torch.cuda.is_available() else "cpu")


def kernel_fn(a, b):
    return OUT
'''


def per_call_us(fn, calls: int) -> float:
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=50_000)


def main(args: argparse.Namespace) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder = Path(tempfile.mkdtemp()) / "opt"
    folder.mkdir()
    (folder / "1_matmul.py").write_text(NO_OP_KERNEL)
    manifest.write_manifest(folder / "manifest.json", {"1_matmul": {
        "file": "1_matmul.py", "kernel_type": "matmul", "rank": 1, "shapes": [{"M": 8, "N": 64, "K": 64}],
        "dtypes": ["float32"]}})
    linear = nn.Linear(64, 64, bias=False).to(device).eval()
    model, x = nn.Sequential(linear), torch.randn(8, 64, device=device)
    with torch.no_grad():
        unplugged = per_call_us(lambda: linear(x), args.calls)
        plugin.plug_in(model, folder, policy=ALL)
        model(x)
        router = plugin.router_of(model)
        decision = next(iter(router.module_routes[0].decisions.values()))
        kernel = router.kernels[0]
        direct_module = nn.Linear(64, 64, bias=False).to(device)
        direct_module.forward = lambda x: decision.reading.launch(kernel.kernel_fn, x)
        direct = per_call_us(lambda: direct_module(x), args.calls)
        routed = per_call_us(lambda: linear(x), args.calls)
        plain_op = per_call_us(lambda: x.view(-1), args.calls)
        with FunctionRouting(router):
            moded_op = per_call_us(lambda: x.view(-1), args.calls)
    print(f"torch {torch.__version__}, {device}")
    print(f"nn.Linear unplugged (PyTorch's call)                  {unplugged:7.2f} us")
    print(f"the route's launch as the module's forward (no router) {direct:7.2f} us")
    print(f"routed through the router, decision cached             {routed:7.2f} us")
    print(f"  the router's own cost per routed call                {routed - direct:7.2f} us")
    print(f"a torch call (x.view) outside / inside the routing mode {plain_op:6.2f} / {moded_op:.2f} us: "
          f"{moded_op - plain_op:.2f} us per call the mode sees")

