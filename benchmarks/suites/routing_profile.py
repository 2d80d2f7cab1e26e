"""Where an eager routed forward spends its time: the router, the launch glue, the kernels' Python, Triton's launcher.

    python benchmarks/end_to_end.py routing-profile [--model models/llama.py] [--model-arg batch=1 ...] [--forwards 20]

Plugs every starter into the model at its profiled shapes ("all" policy) and prints, per forward
pass (wall clock, GPU): the model unplugged; plugged in but bypassed (the patched forwards alone);
routed. Then a cProfile of routed forwards, by own time, and one kernel's call broken down: its
kernel_fn, and the bare Triton launch inside it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

from autokernel.core import interpreter
from benchmarks.common import ROOT

interpreter.choose()

import torch  # noqa: E402


from autokernel.profile import models, profiler  # noqa: E402
from autokernel.routing import plugin  # noqa: E402
from autokernel.routing.decisions import ALL  # noqa: E402
from autokernel.verify import latency, verification  # noqa: E402


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=str(ROOT / "models" / "llama.py"))
    parser.add_argument("--model-arg", action="append", default=[])
    parser.add_argument("--forwards", type=int, default=20)
    parser.add_argument("--workspace", default="/tmp/autokernel_routing_profile")


def main(args: argparse.Namespace) -> None:
    loaded = models.load_model(args.model, dtype="float16",
                               model_kwargs=dict(models.parse_model_arg(a) for a in args.model_arg) or None)
    model, inputs, on_gpu = loaded.model, loaded.inputs, loaded.device.type == "cuda"
    workspace = Path(args.workspace)
    _, plan = profiler.profile_to_workspace(model, inputs, name=loaded.name, workspace=workspace)
    folder = verification.write_starter_manifest(plan, workspace / "starters")
    with torch.no_grad():
        plain = latency.wall_clock(lambda: model(*inputs), on_gpu)
        plugin.plug_in(model, folder, policy=ALL)
        model(*inputs)
        router = plugin.router_of(model)
        with router.bypassed():
            bypassed = latency.wall_clock(lambda: model(*inputs), on_gpu)
        routed = latency.wall_clock(lambda: model(*inputs), on_gpu)
        print(f"per forward: unplugged {plain.median_ms:.3f} ms, plugged but bypassed {bypassed.median_ms:.3f} ms, "
              f"routed {routed.median_ms:.3f} ms; scoped modules {len(router.scoped_modules)}")
        router.reset_stats()
        model(*inputs)
        calls = sum(s.hits for s in router.stats.values())
        print(f"routed calls per forward: {calls}")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.forwards):
            model(*inputs)
        torch.cuda.synchronize() if on_gpu else None
        profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(28)
    stats.sort_stats("cumulative").print_stats(28)
    _one_kernel(router, on_gpu)


def _one_kernel(router, on_gpu: bool) -> None:
    """The first rmsnorm site: kernel_fn through the route's launch, kernel_fn alone, and the bare Triton launch."""
    site = next((s for s in router.sites.values() if s.kernel.kernel_type == "rmsnorm"), None)
    if site is None or site.run_ours is None:
        return
    module = sys.modules[site.kernel.kernel_fn.__module__]
    x = torch.randn(site.shape["M"], site.shape["N"], device="cuda" if on_gpu else "cpu", dtype=site.dtype)
    weight = torch.ones(site.shape["N"], device=x.device, dtype=x.dtype)
    y = torch.empty_like(x)
    figures = {
        "route launch (reshape, contiguous, kernel_fn)": latency.wall_clock(site.run_ours, on_gpu),
        "kernel_fn alone": latency.wall_clock(lambda: site.kernel.kernel_fn(x, weight, 1e-6), on_gpu),
        "torch.empty": latency.wall_clock(lambda: torch.empty_like(x), on_gpu),
        "bare Triton launch": latency.wall_clock(lambda: module._rmsnorm_rows[(x.shape[0] // 2,)](
            x, weight, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0), 1e-6, ROWS=2,
            BLOCK_N=triton_next_power_of_2(x.shape[1]), ONE_BLOCK=True, num_warps=8, num_stages=1), on_gpu),
        "F.rms_norm (PyTorch)": latency.wall_clock(
            lambda: torch.nn.functional.rms_norm(x, (x.shape[1],), weight, 1e-6), on_gpu),
    }
    for name, figure in figures.items():
        print(f"{name:50s} {figure.us:8.1f} us per call")


def triton_next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()

