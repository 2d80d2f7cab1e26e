"""Turns the optimization plan's top entries into kernel jobs: starter kernels stamped with the model's shapes.

    python extract.py [--top N] [--plan workspace/optimization_plan.json] [--out DIR] [--backend triton|cuda|any]

For each planned kernel type in rank order, the starter kernels/<type>.py is copied to
workspace/kernel_<rank>_<type>.py with a `JOB = {...}` literal after its docstring (the model's
shapes and the exact bench.py arguments), and workspace/jobs.json lists the jobs for the
optimization loop. The work is done by autokernel/profile/jobs.py. extract.py in the layout is this module's door;
`autokernel extract` starts it as `python -m autokernel.profile.extract_command`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autokernel.core import paths
from autokernel.core.plan import PlanError
from autokernel.profile import jobs as kernel_jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=paths.command_name("extract.py"),
                                     description="Turn the optimization plan's top entries into kernel jobs.")
    parser.add_argument("--top", type=int, default=5, help="how many kernel types to extract (default 5)")
    parser.add_argument("--plan", default=None, help="the plan file (default workspace/optimization_plan.json)")
    parser.add_argument("--out", default=None, help="workspace directory for the jobs (default workspace/)")
    parser.add_argument("--backend", choices=paths.BACKENDS, default="triton",
                        help="the starters' language: triton (default), cuda (CUDA C++), or any (Triton, may switch)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else paths.WORKSPACE
    plan = Path(args.plan) if args.plan else paths.WORKSPACE / "optimization_plan.json"
    try:
        jobs = kernel_jobs.extract_jobs(plan, args.top, out, args.backend)
    except (PlanError, ValueError, KeyError) as error:
        print(f"{paths.command_name('extract.py')}: {error.args[0]}", file=sys.stderr)
        return 2
    for job in jobs:
        print(f"rank {job.rank}: {job.kernel_type} -> {job.path} ({job.share:.1%} of the time, "
              f"{job.amdahl_2x:.2f}x end to end if made 2x faster)")
        print(f"    python bench.py --kernel {job.path} {' '.join(job.bench_args)}")
    print(f"wrote {out / kernel_jobs.JOBS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
