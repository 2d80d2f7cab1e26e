"""Plugs the optimized kernels into the model and proves the end-to-end result: the same output, and which path is faster.

    python verify.py MODEL [--class-name NAME] [--input-shape 1,512] [--dtype float16]
                     [--model-arg NAME=VALUE ...] [--device cuda]
                     [--optimized-dir optimized_kernels | --starters]
                     [--workspace workspace] [--no-compile] [--compile-backend inductor]
                     [--route measured|all] [--overhead]
    python verify.py models/llama.py --dtype float16 --model-arg batch=4 --model-arg seq=1024
    python verify.py --hf llama [--input-shape 1,512] [--dtype float16] ...

The model is loaded as profile.py loads it (same seed: same weights and inputs). In one process,
on those inputs, it is run and timed six ways: PyTorch eager, torch.compile, torch.compile with
CUDA graphs (mode="reduce-overhead"), and each of the three with our kernels plugged in
(autokernel/endtoend.py). Between the two halves:
  - every kernel is plugged in wherever it was verified, and the model's output must match the
    original's: the correctness check;
  - at every call signature the model makes, our kernel is timed against what PyTorch runs there,
    eagerly and compiled; only the signatures where ours is faster by more than the noise are routed
    in the AutoKernel variants ("--route all" routes every verified call instead). This route table
    is printed, written to the report, and, on a GPU, into the kernels' manifest, which
    autokernel.plug_in follows from then on.
The verdict names PyTorch's best and AutoKernel's best and says which to use: "faster by X", or
"no gain: use <PyTorch's best>". --overhead also sets the all-routed model's latency against the
sum of its parts (autokernel/overhead.py). --starters verifies the starter kernels/<type>.py of
every kernel type in the model's plan (profiled first when there is none), at the plan's shapes.

The error check: for every tensor of the output, max |ours - original| / max |original| must be at
most the output dtype's tolerance (float16 1e-2, bfloat16 2e-2, float32 1e-4), for the checked
all-routed model and for every AutoKernel variant that ran. On the CPU (Triton's interpreter)
timings are wall-clock and NOT MEANINGFUL, and nothing is routed by measurement.
The report is printed and written to workspace/verify_report.json.
Exit code: 0 the error check passes, 1 it fails, 2 verify could not run (bad model, no kernels).
A verdict of "no gain" is not a failure: the exit code is about correctness.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console

from autokernel import handover, interpreter, manifest, models, paths, plugin, profiler
from autokernel.contracts import PlanEntry
from autokernel.regions import jobs as region_jobs
from autokernel.regions import store as region_store
from autokernel.regions.inductor import InductorFailed
from autokernel.regions.starter_code import StarterError
from autokernel.model_args import add_model_arguments, load_model_keywords
from autokernel.outputs import ERROR_DEFINITION
from autokernel.verify_report import print_report

REPORT_FILE = "verify_report.json"
STARTER_MANIFEST_DIR = "starter_kernels"     # under the workspace
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
# The model has no kernel type AutoKernel covers: nothing to check, and the user keeps PyTorch's path.
EXIT_NOTHING_TO_PLUG_IN = 3


class NothingToPlugIn(plugin.PlugInError):
    """The plan has no kernel type AutoKernel has a kernel for."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Plug the optimized kernels into a model, check its output "
                                                 "and compare it end to end with PyTorch's own paths.")
    add_model_arguments(parser)
    kernels = parser.add_mutually_exclusive_group()
    kernels.add_argument("--optimized-dir", default=str(paths.OPTIMIZED_DIR),
                         help="the folder with manifest.json and the kernels (default optimized_kernels/)")
    kernels.add_argument("--starters", action="store_true",
                         help="verify the starter kernels of each kernel type in the model's plan, at its shapes "
                              "and dtype (profiling the model first when the workspace has no plan of it)")
    parser.add_argument("--route", choices=plugin.POLICIES, default=plugin.MEASURED,
                        help="measured (default): route a call only where our kernel was measured faster there; "
                             "all: route every call the kernels were verified for")
    parser.add_argument("--overhead", action="store_true",
                        help="also time the all-routed model against the sum of its parts (routing overhead)")
    parser.add_argument("--workspace", default=str(paths.WORKSPACE),
                        help="where the plan is read (or written by --starters) and verify_report.json written "
                             "(default workspace/)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants (slow on CPU)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend (default inductor; the CUDA-graph variants need inductor)")
    return parser


def main(argv: list[str] | None = None) -> int:
    interpreter.choose()        # first, before any kernel file is imported: no GPU means Triton's interpreter
    args = build_parser().parse_args(argv)
    console = Console()
    workspace = Path(args.workspace)
    region_store.add_folder(workspace / region_store.FOLDER)      # the regions a plan there names
    try:
        loaded = models.load_model(**load_model_keywords(args))
        plan, plan_note = read_model_plan(workspace / profiler.PLAN_FILE, loaded)
        optimized_dir = Path(args.optimized_dir)
        if args.starters:
            optimized_dir, plan, plan_note = starters_of_plan(loaded, workspace, plan, plan_note, console)
        plugin.load_kernels(optimized_dir)    # a missing or broken manifest fails before any timing
        report = verify(loaded, optimized_dir, compile_backend=None if args.no_compile else args.compile_backend,
                        plan=plan, plan_note=plan_note,
                        policy=args.route, overhead=args.overhead,
                        log=lambda line: console.print(line, markup=False, highlight=False))
    except (models.ModelLoadError, plugin.PlugInError) as error:
        print(f"verify.py: {error}", file=sys.stderr)
        return EXIT_NOTHING_TO_PLUG_IN if isinstance(error, NothingToPlugIn) else EXIT_ERROR
    print_report(report, console)
    report_path = workspace / REPORT_FILE
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {report_path}")
    return EXIT_PASS if report["correctness"]["passed"] else EXIT_FAIL


def starters_of_plan(loaded: models.LoadedModel, workspace: Path, plan: dict | None, plan_note: str,
                     console: Console) -> tuple[Path, dict, str]:
    """The starter kernels' folder for this model's plan (profiled first when there is none), the plan and its note."""
    if plan is None:
        console.print(f"{plan_note}: profiling {loaded.name} first", markup=False)
        _, plan = profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=workspace)
        plan_note = f"{_plan_source(workspace / profiler.PLAN_FILE, plan)}, profiled now"
    folder = write_starter_manifest(plan, workspace / STARTER_MANIFEST_DIR)
    console.print(f"the starter kernels of {len(plan['entries'])} kernel types, at the plan's shapes "
                  f"({plan['dtype']}): {folder / paths.MANIFEST_NAME}", markup=False)
    return folder, plan, plan_note


def write_starter_manifest(plan: dict, folder: Path) -> Path:
    """A manifest of the starter kernels/<type>.py of each planned kernel type, at the plan's shapes and dtype.

    It is written to folder/manifest.json (keeping route tables measured before for the same
    sources); the folder is returned, to plug in as an optimized_kernels folder is.
    """
    entries = {}
    for entry in plan["entries"]:
        try:       # a region's starter is Inductor's code for it, generated here (autokernel/regions/jobs.py)
            starter = region_jobs.starter_file(entry["kernel_type"], folder)
        except (InductorFailed, StarterError) as why:
            print(f"no starter for {entry['kernel_type']}: {why}", file=sys.stderr)
            continue
        entries[f"{entry['rank']}_{entry['kernel_type']}"] = plugin.manifest_entry(PlanEntry.from_json(entry), starter)
    if not entries:
        raise NothingToPlugIn(f"the plan of {plan['model']} has no kernel type AutoKernel has a kernel for, "
                              "so there is nothing to plug in")
    manifest_path = folder / paths.MANIFEST_NAME
    earlier = manifest.read_manifest(manifest_path) if manifest_path.is_file() else {}
    for name, entry in entries.items():
        if manifest.ROUTE_TABLE in earlier.get(name, {}):
            entry[manifest.ROUTE_TABLE] = earlier[name][manifest.ROUTE_TABLE]
    plugin.write_manifest(manifest_path, entries)
    return folder


def verify(loaded: models.LoadedModel, optimized_dir: str | Path, *, compile_backend: str | None, plan: dict | None,
           plan_note: str, policy: str = plugin.MEASURED, overhead: bool = False,
           log: Callable[[str], None] = lambda line: None) -> dict:
    """The end-to-end comparison and checks (autokernel/handover.py), as plain data; route tables saved on a GPU."""
    on_gpu = loaded.device.type == "cuda"
    compared = handover.compare_and_record(loaded.model, loaded.inputs, optimized_dir, on_gpu=on_gpu,
                                           compile_backend=compile_backend, policy=policy, overhead=overhead, log=log)
    routing = compared.pop("routing")
    shares = {entry["kernel_type"]: entry["share"] for entry in plan["entries"]} if plan else {}
    for kernel in routing["kernels"]:
        kernel["share"] = shares.get(kernel["kernel_type"])
    errors = [v["error"] for v in compared["variants"].values() if v["variant"].startswith("ours") and v["ms"]]
    allowed = compared["tolerance"]
    passed = compared["checked"]["passed"] and all(error <= allowed for error in errors)
    return {
        "model": loaded.name, "device": str(loaded.device), "device_name": plugin.device_name(),
        "dtype": str(loaded.dtype).removeprefix("torch."), "inputs": profiler.describe_inputs(loaded.inputs),
        "versions": {"torch": torch.__version__, "triton": _triton_version()},
        "optimized_dir": str(optimized_dir),
        "plan": plan_note if plan else f"{plan_note}: shares unknown (run profile.py on this model)",
        "replaced_share": sum({k["kernel_type"]: k["share"] or 0.0 for k in routing["kernels"] if k["hits"]}.values())
                          if shares else None,
        **routing, **compared,
        "correctness": {"max_error": compared["checked"]["max_error"], "variant_max_error": max(errors, default=None),
                        "tolerance": allowed, "passed": passed, "definition": ERROR_DEFINITION},
        "timings_meaningful": on_gpu,
    }


def _triton_version() -> str:
    import triton

    return triton.__version__


def read_model_plan(plan_path: Path, loaded: models.LoadedModel) -> tuple[dict | None, str]:
    """The plan at plan_path if it is this model's, else None; and a note on which.

    This model's plan has the same name, device and dtype, and, when the plan records them (older
    plans do not), the same inputs: a plan profiled at another --input-shape has other shapes.
    """
    if not plan_path.is_file():
        return None, f"no plan at {plan_path}"
    try:
        plan = json.loads(plan_path.read_text())
    except json.JSONDecodeError:
        return None, f"{plan_path} is not valid JSON"
    if not isinstance(plan, dict) or not isinstance(plan.get("entries"), list):
        return None, f"{plan_path} is not an optimization plan"
    this_model = (loaded.name, loaded.device.type, str(loaded.dtype).removeprefix("torch."))
    planned = (plan.get("model"), plan.get("device"), plan.get("dtype"))
    if planned != this_model:
        return None, f"{plan_path} is the plan of {_describe(*planned)}, not of {_describe(*this_model)}"
    these_inputs = profiler.describe_inputs(loaded.inputs)
    if "inputs" in plan and plan["inputs"] != these_inputs:
        return None, (f"{plan_path} is the plan of {_describe(*planned)} with inputs {json.dumps(plan['inputs'])}, "
                      f"not {json.dumps(these_inputs)}")
    return plan, _plan_source(plan_path, plan)


def _describe(model_name, device, dtype) -> str:
    return f"{model_name} ({device}, {dtype})"


def _plan_source(plan_path: Path, plan: dict) -> str:
    return f"shares from {plan_path} ({plan.get('timing', 'measured time')} on {plan.get('device_name', '?')})"


if __name__ == "__main__":
    sys.exit(main())
