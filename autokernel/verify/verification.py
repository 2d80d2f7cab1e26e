"""The end-to-end verification that verify.py runs: the plan, the starters, the comparison, the report.

It runs inside the sandbox (autokernel/verify/isolated.py starts it there), because it imports kept
kernels, which are code an LLM wrote. So it writes nothing of the user's: it reads the workspace
(the plan) and writes every file it makes into `out` (the profile and the plan when it profiled, the
starters' manifest, the report), and it hands back the route tables it measured as data. The parent,
outside the sandbox, checks and copies what it may (isolated.py); nothing the child writes is kept
otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console

from autokernel.core import paths, stopwatch
from autokernel.core.contracts import ContractError
from autokernel.core.plan import Plan
from autokernel.kernel_types.regions import store as region_store
from autokernel.profile import models, profiler
from autokernel.profile.regions import jobs as region_jobs
from autokernel.profile.regions.inductor import InductorFailed
from autokernel.profile.regions.starter_code import StarterError
from autokernel.routing import manifest, plugin
from autokernel.routing.decisions import MEASURED
from autokernel.routing.manifest import PlugInError, manifest_entry, write_manifest
from autokernel.routing.outputs import ERROR_DEFINITION
from autokernel.verify import handover
from autokernel.verify.containment import CHECK, PROFILE, STARTER, Drops
from autokernel.verify.coverage import coverage
from autokernel.verify.report_record import ErrorCheck, Verdict, VerifyReport

REPORT_FILE = "verify_report.json"
STARTER_MANIFEST_DIR = "starter_kernels"     # under the workspace
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
# The model has no kernel type AutoKernel covers: nothing to check, and the user keeps PyTorch's path.
EXIT_NOTHING_TO_PLUG_IN = 3
# Kernels were plugged in, but the model made no call any of them took (every call fell back): the output
# matched because only PyTorch ran, so nothing was checked; the report says which kernel took none and why.
EXIT_NOTHING_CHECKED = 4
# Verified, with parts dropped for failures (the report's `dropped` says which and why): the verdict stands.
EXIT_DROPPED = 5
# verify --starters checks the starters of the plan's kernel types with the most time, as optimize works on its top
# jobs: a convolutional net plans thirty, and each starter costs a compile and an autotuning.
STARTERS_TOP = 8


class NothingToPlugIn(PlugInError):
    """The plan has no kernel type AutoKernel has a kernel for."""


@dataclass
class Outcome:
    """What one verification hands back: its exit code, the report, the route tables to record, and the
    files it made (relative to the workspace; the starters' manifest and, when it profiled, the plan)."""
    exit_code: int
    report: VerifyReport | None = None
    route_tables: dict = field(default_factory=dict)   # kernel name -> {"source_sha256", "device", "records"}
    tables_for: str | None = None                      # the manifest they belong to: "optimized" or "starters"
    made: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"exit_code": self.exit_code, "report": self.report.to_json() if self.report else None,
                "route_tables": self.route_tables, "tables_for": self.tables_for, "made": self.made}

    @classmethod
    def from_json(cls, data: dict) -> "Outcome":
        """The outcome the sandboxed child sent; ValueError (a ContractError for the report) when it is not one."""
        if not isinstance(data, dict) or type(data.get("exit_code")) is not int:
            raise ValueError("not a verification outcome")
        made, tables = data.get("made") or [], data.get("route_tables") or {}
        # The child imported kept kernels: its JSON is checked here, so a malformed one is an error, not a traceback.
        if not isinstance(made, list) or not all(isinstance(name, str) for name in made):
            raise ValueError("its files made are not a list of names")
        handover.checked_tables(tables)
        report = VerifyReport.from_json(data["report"]) if data.get("report") is not None else None
        return cls(exit_code=data["exit_code"], report=report, route_tables=tables,
                   tables_for=data.get("tables_for"), made=made)


def run(loaded: models.LoadedModel, *, workspace: Path, out: Path, optimized_dir: Path | None, starters: bool,
        compile_backend: str | None, policy: str, overhead: bool, console: Console,
        max_autotune: bool = False, top: int = STARTERS_TOP) -> Outcome:
    """Verify: read the plan from `workspace`, write what is made into `out`; the report is printed.

    Every failure short of the model's own forward is contained (containment.py): what failed is dropped with its
    reason, and the report still ends with a verdict, PyTorch's best at the least."""
    log = lambda line: console.print(line, markup=False, highlight=False)      # noqa: E731
    drops = Drops(log)
    region_store.add_folder(workspace / region_store.FOLDER)      # the regions a plan there names
    plan, plan_note = read_model_plan(workspace / profiler.PLAN_FILE, loaded)
    made: list[str] = []
    folder: Path | None = optimized_dir
    nothing = None
    if starters:
        try:
            folder, plan, plan_note, made = starters_of_plan(loaded, workspace, out, plan, plan_note, console, drops,
                                                                 top)
        except NothingToPlugIn as why:      # PyTorch's own paths are still compared, and the verdict names the best
            folder, nothing = None, why
            log(f"{why}: comparing PyTorch's own paths")
        except Exception as exc:            # the profile or the plan broke: no kernel to check, PyTorch's best
            drops.add(PROFILE, loaded.name, exc)
            folder = None
    if folder is not None:
        plugin.load_kernels(folder, on_failure=lambda name, exc: None)    # a missing or broken manifest fails here
    try:
        report, tables = verify(loaded, folder, compile_backend=compile_backend, plan=plan, plan_note=plan_note,
                                policy=policy, overhead=overhead, log=log, drops=drops, max_autotune=max_autotune)
    except Exception as exc:          # the last line of defence: our part dropped whole, PyTorch's paths compared
        if folder is None:
            raise
        drops.add(CHECK, "every kernel", exc)
        report, tables = verify(loaded, None, compile_backend=compile_backend, plan=plan, plan_note=plan_note,
                                policy=policy, overhead=False, log=log, drops=drops, max_autotune=max_autotune)
    if starters:
        report.optimized_dir = str(workspace / STARTER_MANIFEST_DIR)
    (out / REPORT_FILE).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    made.append(REPORT_FILE)
    return Outcome(exit_code(report, nothing is not None), report, tables,
                   "starters" if starters else "optimized", made)


def exit_code(report: VerifyReport, nothing_to_plug_in: bool = False) -> int:
    """A failed check fails; else nothing to plug in; else parts dropped for failures (which may be why nothing was
    checked: the report says so); else a check that routed no kernel call checked nothing, which is not a pass."""
    if not report.passed:
        return EXIT_FAIL
    if nothing_to_plug_in:
        return EXIT_NOTHING_TO_PLUG_IN
    if report.dropped:
        return EXIT_DROPPED
    return EXIT_NOTHING_CHECKED if report.checked_nothing else EXIT_PASS


def starters_of_plan(loaded: models.LoadedModel, workspace: Path, out: Path, plan: Plan | None, plan_note: str,
                     console: Console, drops: Drops | None = None,
                     top: int = STARTERS_TOP) -> tuple[Path, dict, str, list[str]]:
    """The starter kernels' folder (in `out`) for the `top` kernel types of this model's plan (0: all), profiled first
    when there is none; the plan, its note and the files made."""
    made = []
    if plan is None:
        console.print(f"{plan_note}: profiling {loaded.name} first", markup=False)
        with stopwatch.recording() as profiling, profiling.timing(PROFILED):
            _, plan = profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=out)
        console.print(_took(profiling, PROFILED), markup=False)
        plan_note = f"{_plan_source(workspace / profiler.PLAN_FILE, plan)}, profiled now"
        # The regions the plan names go with it: a later verify of this workspace reuses the plan, and without them
        # every region's starter was dropped ("unknown kernel type", H200, session 23).
        made += [profiler.PLAN_FILE, profiler.REPORT_FILE,
                 *(str(path.relative_to(out)) for path in sorted((out / region_store.FOLDER).glob("*.json")))]
    earlier = workspace / STARTER_MANIFEST_DIR / paths.MANIFEST_NAME
    with stopwatch.recording() as generating, generating.timing(GENERATED):
        folder = write_starter_manifest(plan, out / STARTER_MANIFEST_DIR, earlier=earlier, drops=drops, top=top)
    console.print(_took(generating, GENERATED), markup=False)
    console.print(f"the starter kernels of {_which_types(plan, top)}, at the plan's shapes "
                  f"({plan.dtype}): {workspace / STARTER_MANIFEST_DIR / paths.MANIFEST_NAME}", markup=False)
    made += [str(path.relative_to(out)) for path in sorted(folder.rglob("*")) if path.is_file()]
    return folder, plan, plan_note, made


# The lines that say where the phase before the comparison went (its GPU time grew session over session, unsaid).
PROFILED, GENERATED = "profiled", "starters made"


def _took(watch: stopwatch.Stopwatch, whole: str) -> str:
    """'profiled in 8.4 s (torch profiler 4.3 s, regions 4.1 s, region capture 3.4 s, region timing 0.6 s (5x))'."""
    parts = watch.parts(tuple(name for name in watch.seconds if name != whole))
    return f"{whole} in {watch.seconds[whole]:.1f} s" + (f" ({parts})" if parts else "")


def _which_types(plan: Plan, top: int) -> str:
    """"8 kernel types", or "the top 8 of 31 kernel types (87% of the profiled time)"."""
    chosen = _top_entries(plan, top)
    if len(chosen) == len(plan.entries):
        return f"{len(chosen)} kernel type{'s' * (len(chosen) != 1)}"
    share = sum(entry.share for entry in chosen)
    return (f"the top {len(chosen)} of {len(plan.entries)} kernel types ({share:.0%} of the profiled time; "
            f"--top 0 checks them all)")


def _top_entries(plan: Plan, top: int) -> list:
    return plan.entries[:top] if top > 0 else plan.entries


def _quiet(line: str) -> None:
    """Where no one listens: write_starter_manifest called without `drops`."""


def starter_entries(plan: Plan, folder: Path, drops: Drops | None = None, top: int = 0) -> dict[str, dict]:
    """The manifest entries of the starters of the plan's `top` kernel types (0: all), at the plan's shapes:
    kernels/<type>.py, or for a region Inductor's code for it, generated into folder (with its region file) and named
    relative to it. A starter that cannot be made is left out (dropped into `drops`, when given)."""
    entries = {}
    for entry in _top_entries(plan, top):
        try:       # a region's starter is Inductor's code for it, generated here (autokernel/profile/regions/jobs.py)
            starter = region_jobs.starter_file(entry.kernel_type, folder,
                                               log=drops.log if drops is not None else _quiet)
        except (InductorFailed, StarterError) as why:
            (drops.log if drops is not None else print)(f"no starter for {entry.kernel_type}: {why}")
            continue
        except Exception as exc:          # anything else its generation raised: this starter is dropped, not verify
            if drops is None:
                raise
            drops.add(STARTER, entry.kernel_type, exc)
            continue
        named = starter.name if starter.parent == folder else starter
        entries[f"{entry.rank}_{entry.kernel_type}"] = manifest_entry(entry, named)
    return entries


def write_starter_manifest(plan: Plan, folder: Path, earlier: Path | None = None, drops: Drops | None = None,
                           top: int = 0) -> Path:
    """A manifest of the starter kernels of the plan, in folder/manifest.json (keeping the route tables measured
    before for the same sources, from `earlier`, by default that file itself); the folder is returned."""
    entries = starter_entries(plan, folder, drops, top)
    if not entries:
        raise NothingToPlugIn(f"the plan of {plan.model} has no kernel type AutoKernel has a kernel for, "
                              "so there is nothing to plug in")
    manifest_path = folder / paths.MANIFEST_NAME
    earlier = earlier or manifest_path
    before = manifest.read_manifest(earlier) if earlier.is_file() else {}
    for name, entry in entries.items():
        if manifest.ROUTE_TABLE in before.get(name, {}):
            entry[manifest.ROUTE_TABLE] = before[name][manifest.ROUTE_TABLE]
    write_manifest(manifest_path, entries)
    return folder


def verify(loaded: models.LoadedModel, optimized_dir: str | Path | None, *, compile_backend: str | None,
           plan: Plan | None, plan_note: str, policy: str = MEASURED, overhead: bool = False,
           log: Callable[[str], None] = lambda line: None, drops: Drops | None = None,
           max_autotune: bool = False) -> tuple[VerifyReport, dict]:
    """The end-to-end comparison and checks (autokernel/verify/handover.py) as the report, and the route tables
    measured; optimized_dir None compares PyTorch's own paths alone."""
    on_gpu = loaded.device.type == "cuda"
    drops = drops if drops is not None else Drops(log)
    compared, tables = handover.compare(loaded.model, loaded.inputs, optimized_dir, on_gpu=on_gpu,
                                        compile_backend=compile_backend, policy=policy, overhead=overhead, log=log,
                                        drops=drops, max_autotune=max_autotune)
    compared.pop("dropped", None)         # the same units as `drops`, which also holds those dropped before
    routing = compared.pop("routing")
    kernels = routing.pop("kernels")
    shares = plan.shares() if plan else {}
    for kernel in kernels:
        kernel["share"] = shares.get(kernel["kernel_type"])
    errors = [v["error"] for v in compared["variants"].values() if v["variant"].startswith("ours") and v["ms"]]
    allowed = compared["tolerance"]
    covered = coverage(compared["checked"])
    check = ErrorCheck(max_error=compared["checked"]["max_error"], variant_max_error=max(errors, default=None),
                       tolerance=allowed, passed=compared["checked"]["passed"] and all(e <= allowed for e in errors),
                       definition=ERROR_DEFINITION, calls_checked=covered.calls_checked,
                       not_checked=covered.not_checked)
    report = VerifyReport(
        model=loaded.name, device=str(loaded.device), device_name=plugin.device_name(),
        dtype=str(loaded.dtype).removeprefix("torch."), inputs=profiler.describe_inputs(loaded.inputs),
        versions={"torch": torch.__version__, "triton": _triton_version()}, optimized_dir=str(optimized_dir),
        plan=plan_note if plan else f"{plan_note}: shares unknown (run profile.py on this model)",
        replaced_share=sum({k["kernel_type"]: k["share"] or 0.0 for k in kernels if k["hits"]}.values())
                       if shares else None,
        kernels=kernels, checked=compared["checked"], route_table=compared["route_table"],
        variants=compared["variants"], verdict=Verdict(**compared["verdict"]), correctness=check, tolerance=allowed,
        timings_meaningful=on_gpu, selection=compared["selection"], headroom=compared["headroom"],
        overhead=compared.get("overhead"), extra=routing, dropped=drops.to_json(), runs=kernel_runs(optimized_dir))
    return report, tables


def kernel_runs(optimized_dir: str | Path | None) -> list[str]:
    """The runs whose kernels optimized_dir holds: the tags its manifest's entries were saved with (the starters'
    entries have none); none where there is no readable manifest (verify drops that part and says why)."""
    if optimized_dir is None:
        return []
    try:
        entries = manifest.read_manifest(Path(optimized_dir) / paths.MANIFEST_NAME)
    except manifest.PlugInError:
        return []
    return sorted({entry["tag"] for entry in entries.values() if isinstance(entry, dict) and entry.get("tag")})


def _triton_version() -> str:
    import triton

    return triton.__version__


def read_model_plan(plan_path: Path, loaded: models.LoadedModel) -> tuple[Plan | None, str]:
    """The plan at plan_path if it is this model's, else None; and a note on which.

    This model's plan has the same name, device and dtype, and, when the plan records them (older
    plans do not), the same inputs: a plan profiled at another --input-shape has other shapes.
    """
    if not plan_path.is_file():
        return None, f"no plan at {plan_path}"
    try:
        plan = Plan.from_json(json.loads(plan_path.read_text()))
    except json.JSONDecodeError:
        return None, f"{plan_path} is not valid JSON"
    except ContractError as error:
        return None, f"{plan_path} is not an optimization plan ({error})"
    this_model = (loaded.name, loaded.device.type, str(loaded.dtype).removeprefix("torch."))
    planned = (plan.model, plan.device, plan.dtype)
    if planned != this_model:
        return None, f"{plan_path} is the plan of {_describe(*planned)}, not of {_describe(*this_model)}"
    these_inputs = profiler.describe_inputs(loaded.inputs)
    if plan.inputs is not None and plan.inputs != these_inputs:
        return None, (f"{plan_path} is the plan of {_describe(*planned)} with inputs {json.dumps(plan.inputs)}, "
                      f"not {json.dumps(these_inputs)}")
    return plan, _plan_source(plan_path, plan)


def _describe(model_name, device, dtype) -> str:
    return f"{model_name} ({device}, {dtype})"


def _plan_source(plan_path: Path, plan: Plan) -> str:
    """Where the shares come from, with what the plan says of its own times (profiled on CPU, noisy, scaled)."""
    return f"shares from {plan_path} ({plan.timing} on {plan.device_name})" + "".join(
        f"; {caveat}" for caveat in plan.caveats)
