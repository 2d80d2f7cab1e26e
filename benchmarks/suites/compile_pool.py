"""Inductor's compile workers inside the sandbox, with its own /dev/shm and without: multiprocessing's lock, the pool.

    python benchmarks/judge.py compile-pool [--out DIR] [--wait S] [--kernels N]   (DIR defaults to $OUT)

Inside runner.run_child (the sandbox verify's child and the judge run in), once with AUTOKERNEL_SANDBOX_SHM=1 (a
/dev/shm of the namespace's own) and once with =0 (the machine's, where nothing can be made): whether
multiprocessing.Lock() works, whether Inductor's compile-worker pool becomes ready within --wait seconds (without a
/dev/shm to make semaphores in, it never does, and says nothing), and the wall time of one torch.compile of a
function of N independent reductions (fresh caches: each child has its own) on the GPU, or the CPU without one, and
the process tree's peak resident memory (the workers count against the sandbox's memory cap). Writes
compile_pool.json and compile_pool.md under DIR; exits 1 when the pool is not ready with the /dev/shm on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

from autokernel.judge import runner
from autokernel.sandbox import confinement

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent("""
    import json, multiprocessing, os, sys, time
    wait_s, kernels = float(sys.argv[1]), int(sys.argv[2])
    facts = {}
    try:
        multiprocessing.Lock()
        facts["lock"] = "ok"
    except OSError as exc:
        facts["lock"] = f"{type(exc).__name__}: {exc}"
    import torch
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile
    facts["compile_threads"] = config.compile_threads
    begun = time.monotonic()
    AsyncCompile.use_process_pool()         # what Inductor asks before each compile: submits the readiness job
    try:
        AsyncCompile._ready_future.result(timeout=wait_s)
        facts["pool"] = f"ready in {time.monotonic() - begun:.1f} s"
    except AttributeError:
        facts["pool"] = "none asked for (one compile thread, or the pool not allowed)"
    except Exception as exc:
        facts["pool"] = f"not ready after {time.monotonic() - begun:.1f} s ({type(exc).__name__})"
    facts["compiles_in_workers"] = AsyncCompile.use_process_pool()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def many(x):      # independent reductions Inductor cannot fuse into one kernel: one compile job each
        return [((x * (i + 1)).sin() @ x.T).softmax(-1).sum(0) for i in range(kernels)]

    x = torch.randn(64, 64, device=device)
    begun = time.monotonic()
    torch.compile(many)(x)
    if device == "cuda":
        torch.cuda.synchronize()
    facts["compile_s"] = round(time.monotonic() - begun, 1)
    facts["device"] = device
    print("FACTS " + json.dumps(facts), flush=True)
    os._exit(0)       # a pool that never became ready would otherwise hold the exit
""")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the pool (default 30)")
    parser.add_argument("--kernels", type=int, default=12, help="reductions in the compiled function (default 12)")


def main(args: argparse.Namespace) -> int:
    rows, lines = [], [f"# Inductor's compile pool in the sandbox on {os.uname().nodename}", ""]
    chosen = os.environ.get(confinement.PRIVATE_SHM_ENV)
    try:
        for shm in ("1", "0"):
            os.environ[confinement.PRIVATE_SHM_ENV] = shm       # the launcher reads it from the child's environment
            begun = time.monotonic()
            child = runner.run_child([sys.executable, "-c", PROBE, str(args.wait), str(args.kernels)],
                                     timeout_s=args.wait + 240, cwd=ROOT)
            found = [line[6:] for line in child.stdout.splitlines() if line.startswith("FACTS ")]
            facts = json.loads(found[-1]) if found else {"error": child.exit_description(),
                                                         "stderr": child.stderr[-2000:]}
            wall_s = round(time.monotonic() - begun, 1)
            rows.append({"AUTOKERNEL_SANDBOX_SHM": shm, "shm": child.sandbox.get("shm"), "wall_s": wall_s,
                         "peak_rss_mb": child.peak_rss_mb, **facts})
            lines.append(f"- SHM={shm} ({child.sandbox.get('shm')}): {json.dumps(facts)} (wall {wall_s} s, the tree's "
                         f"peak resident memory {child.peak_rss_mb} MiB)")
            print(lines[-1], flush=True)
    finally:
        if chosen is None:
            os.environ.pop(confinement.PRIVATE_SHM_ENV, None)
        else:
            os.environ[confinement.PRIVATE_SHM_ENV] = chosen
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_pool.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "compile_pool.md").write_text("\n".join(lines) + "\n")
    return 0 if str(rows[0].get("pool", "")).startswith("ready") else 1
