"""Kernel jobs from the optimization plan: each planned kernel type's starter, stamped with the model's shapes.

For each planned kernel type in rank order ("other" is not a kernel), the starter kernels/<type>.py
is copied to workspace/kernel_<rank>_<type>.py with a `JOB = {...}` literal after its docstring:
the rank, the model, its dtype and its real shapes (most time first), and the exact bench.py
arguments that check and time the kernel at those shapes. workspace/jobs.json lists the jobs for
the optimization loop. extract.py is the command line for it.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Callable

from autokernel.core import paths
from autokernel.core.contracts import Job, PlanEntry
from autokernel.core.plan import PlanError, read_plan
from autokernel.kernel_types import registry
from autokernel.kernel_types.regions import store
from autokernel.kernel_types.regions.record import region_title

JOBS_FILE = "jobs.json"


def bench_args(shapes: list[dict], dtype: str) -> list[str]:
    """The bench.py arguments that check and time a kernel at these shapes in this dtype."""
    return [arg for shape in shapes for arg in ("--shape", registry.format_shape(shape))] + ["--dtype", dtype]


def make_job(entry: PlanEntry, model: str, path: Path, backend: str = "triton") -> Job:
    shapes = entry.shapes
    return Job(rank=entry.rank, kernel_type=entry.kernel_type, model=model, dtype=entry.dtype, shapes=shapes,
               shape_args=[registry.format_shape(s) for s in shapes], bench_args=bench_args(shapes, entry.dtype),
               share=entry.share, amdahl_2x=entry.amdahl_2x, path=str(path), backend=backend,
               title=region_title(entry.extra.get("region", {}).get("ops") or []))


def stamp_starter(source: str, job: Job) -> str:
    """The starter's source with a header comment and the JOB literal inserted after its docstring."""
    tree = ast.parse(source)
    split_line = tree.body[0].end_lineno if ast.get_docstring(tree) is not None else 0
    lines = source.splitlines(keepends=True)
    fields = {key: getattr(job, key) for key in ("rank", "kernel_type", "model", "dtype", "shapes", "shape_args",
                                                 "bench_args")}
    header = (
        f"\n# Kernel job {job.rank} for {job.model}: {job.kernel_type}, {job.share:.1%} of the "
        f"measured time\n# (made 2x faster: {job.amdahl_2x:.3f}x end to end). Written by extract.py from "
        f"the optimization plan;\n# bench.py checks and times it at the model's shapes with:\n"
        f"#   python bench.py --kernel {job.path} {' '.join(job.bench_args)}\n"
        "JOB = {\n" + "".join(f"    {key!r}: {value!r},\n" for key, value in fields.items()) + "}\n"
    )
    return "".join(lines[:split_line]) + header + "".join(lines[split_line:])


def extract_jobs(plan_path: str | Path, top: int, workspace: str | Path, backend: str = "triton",
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> list[Job]:
    """Write one kernel file per planned kernel type (the top `top` by rank) and jobs.json; return the jobs.

    Each job starts from its type's starter in `backend`'s language (paths.starter_path); a region's from
    Inductor's code for it. A region whose starter cannot be made is passed over, and `log` says why.
    """
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    if backend not in paths.BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(paths.BACKENDS)}, got {backend!r}")
    plan = read_plan(plan_path)
    folder = Path(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    jobs = []
    store.add_folder(folder / store.FOLDER)
    for entry in plan.entries:
        if len(jobs) == top:
            break
        registry.get(entry.kernel_type)
        if not entry.shapes:
            raise PlanError(f"plan entry rank {entry.rank} ({entry.kernel_type}) has no shapes; run profile.py again")
        if store.is_region(entry.kernel_type):
            jobs += _region_jobs(entry, plan.model, folder, log)[:top - len(jobs)]
            continue
        starter = paths.starter_path(entry.kernel_type, backend)
        if not starter.is_file() and backend == "cuda":
            have = sorted(p.stem for p in starter.parent.glob("*.py") if not p.name.startswith("_"))
            raise PlanError(f"no cuda starter kernel for {entry.kernel_type}: expected {starter} (the cuda "
                            f"starters: {', '.join(have)}); use --backend triton or any, or a smaller --top")
        if not starter.is_file():
            raise PlanError(f"no starter kernel for {entry.kernel_type}: expected {starter}")
        target = folder / f"kernel_{entry.rank}_{entry.kernel_type}.py"
        job = make_job(entry, plan.model, target, backend)
        target.write_text(stamp_starter(starter.read_text(), job))
        jobs.append(job)
    (folder / JOBS_FILE).write_text(json.dumps([job.to_json() for job in jobs], indent=2) + "\n")
    return jobs


def _region_jobs(entry: PlanEntry, model: str, folder: Path, log: Callable[[str], None]) -> list[Job]:
    """A region's job, its starter Inductor's code for it (autokernel/profile/regions/jobs.py; Triton whatever the
    backend). Where Inductor's code for it cannot be a starter, said why, the menu's jobs for the calls it took from the menu
    (a GEMM at its head, a softmax in it) at its rank, so nothing the menu would have planned is lost."""
    from autokernel.profile.regions import jobs as region_jobs
    from autokernel.profile.regions.inductor import InductorFailed
    from autokernel.profile.regions.starter_code import StarterError

    try:
        source = region_jobs.starter_source(entry.kernel_type, variants=True, log=log)
    except (InductorFailed, StarterError) as why:
        taken: dict[str, list[dict]] = {}
        for kernel_type, shape in entry.extra.get("region", {}).get("takes", []):
            if shape not in taken.setdefault(kernel_type, []):
                taken[kernel_type].append(shape)
        log(f"plan entry rank {entry.rank} ({entry.kernel_type}): no starter ({why}); "
            f"{', '.join(taken) or 'nothing'} from the menu in its place")
        fallback = [PlanEntry(rank=entry.rank, kernel_type=kernel_type, dtype=entry.dtype, shapes=shapes,
                              share=entry.share, amdahl_2x=entry.amdahl_2x, time_ms=entry.time_ms)
                    for kernel_type, shapes in taken.items()]
        return [_menu_job(menu, model, folder) for menu in fallback]
    target = folder / f"kernel_{entry.rank}_{entry.kernel_type}.py"
    job = make_job(entry, model, target, "triton")
    target.write_text(stamp_starter(source, job))
    return [job]


def _menu_job(entry: PlanEntry, model: str, folder: Path) -> Job:
    target = folder / f"kernel_{entry.rank}_{entry.kernel_type}.py"
    job = make_job(entry, model, target, "triton")
    target.write_text(stamp_starter(paths.starter_path(entry.kernel_type, "triton").read_text(), job))
    return job


def read_jobs(workspace: str | Path) -> list[Job]:
    """The jobs extract wrote into workspace/jobs.json."""
    return [Job.from_json(job) for job in json.loads((Path(workspace) / JOBS_FILE).read_text())]
