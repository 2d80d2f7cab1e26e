"""What a run optimizes: profile a model (a file or an object in memory) and extract its top kernels as jobs."""

from __future__ import annotations

from typing import Callable

from autokernel.core import paths
from autokernel.core.contracts import Job
from autokernel.core.errors import OptimizationError
from autokernel.core.live import TORCH_LOG, quiet_native_output
from autokernel.core.plan import read_plan


def jobs_from_profile(model, inputs, *, name: str, top: int, log: Callable[[str], None],
                      backend: str = "triton") -> list[Job]:
    """Profile an nn.Module into workspace/optimization_plan.json and extract its top kernels as jobs (Amdahl order)."""
    from autokernel.profile import jobs as kernel_jobs, profiler

    log(f"profiling {name} (torch's own output goes to workspace/{TORCH_LOG}) ...")
    plan_path = paths.WORKSPACE / profiler.PLAN_FILE
    said: list[str] = []
    # Extracting makes the regions' starters with Inductor, whose autotuning prints too: into the log as well. Our
    # own lines meanwhile are held, and said once the terminal is ours again.
    try:
        with quiet_native_output(paths.WORKSPACE / TORCH_LOG):
            profiler.profile_to_workspace(model, inputs, name=name, workspace=paths.WORKSPACE)
            jobs = kernel_jobs.extract_jobs(plan_path, top, paths.WORKSPACE, backend, log=said.append)
    finally:
        for line in said:
            log(line)
    if not jobs:
        raise OptimizationError(f"the profile found no kernel that AutoKernel can optimize (plan: {plan_path})")
    plan = read_plan(plan_path)
    for job in jobs:
        log(f"job rank {job.rank}: {job.type_label} ({job.share:.1%} of the {plan.timing}, "
            f"{job.amdahl_2x:.2f}x end to end if made 2x faster)")
    for caveat in plan.caveats:
        log(f"the plan: {caveat}")
    return sorted(jobs, key=lambda job: job.rank)


def model_file_planner(model: str | None, *, class_name: str | None = None,
                       input_shape: tuple[int, ...] | None = None, dtype: str | None = None, hf: str | None = None,
                       model_kwargs: dict | None = None, top: int = 5,
                       backend: str = "triton") -> Callable[[Callable[[str], None]], list[Job]]:
    """A plan for session.run_optimization: load the model file (or --hf architecture), profile, extract."""
    def plan(log: Callable[[str], None]) -> list[Job]:
        from autokernel.profile import models

        loaded = models.load_model(model, class_name=class_name, input_shape=input_shape, dtype=dtype, hf=hf,
                                   model_kwargs=model_kwargs)
        return jobs_from_profile(loaded.model, loaded.inputs, name=loaded.name, top=top, log=log, backend=backend)
    return plan
