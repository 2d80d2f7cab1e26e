"""Plugs the optimized kernels into the model and proves the end-to-end result: the same output, and the speedup.

    python verify.py MODEL [--class-name NAME] [--input-shape 1,512] [--dtype float16]
                     [--model-arg NAME=VALUE ...] [--device cuda]
                     [--optimized-dir optimized_kernels | --starters]
                     [--workspace workspace] [--no-compile] [--compile-backend inductor]
    python verify.py --hf llama [--input-shape 1,512] [--dtype float16] ...

The model is loaded as profile.py loads it (same seed: same weights and inputs). The original runs
first and is timed eagerly and under torch.compile; then the kernels in optimized_kernels/ are
plugged in (autokernel/plugin.py) and the model runs again, counting which calls each kernel took
(hits) and which went back to PyTorch (fallbacks, with the reason), and is timed eagerly and
compiled. Each kernel's share of the model's time comes from workspace/optimization_plan.json
when it is the plan of this model (the same model name, device and dtype, and, when the plan
records them, the same inputs).

--starters verifies the model with the current kernels, before any optimization run: the starter
kernels/<type>.py of every kernel type in this model's plan (profiled first, into the workspace,
when there is none), listed at the plan's shapes and dtype in workspace/starter_kernels/manifest.json
and plugged in from there as optimized kernels are. bench.py has not checked them at those shapes:
the end-to-end error check below is their check.

The error check: for every tensor of the output, max |ours - original| / max |original| (the error
relative to the output's scale; see plugin.output_error) must be at most the tolerance of the
output's dtype: float16 1e-2, bfloat16 2e-2, float32 1e-4. Latencies are medians of
triton.testing.do_bench on a GPU; on the CPU (Triton's interpreter) they are wall-clock medians
and NOT MEANINGFUL. The report is printed and written to workspace/verify_report.json.
Exit code: 0 the check passes, 1 it fails, 2 verify could not run (bad model, no kernels).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# First, before anything imports torch._dynamo: without a GPU it switches on Triton's interpreter.
from autokernel import plugin
from autokernel import models, paths, profiler, timing
from autokernel.model_args import add_model_arguments, load_model_keywords

REPORT_FILE = "verify_report.json"
STARTER_MANIFEST_DIR = "starter_kernels"     # under the workspace
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
ERROR_DEFINITION = ("max over output tensors of max|ours - original| / max|original|, "
                    "against the output dtype's tolerance (float16 1e-2, bfloat16 2e-2, float32 1e-4)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Plug the optimized kernels into a model, check its output "
                                                 "and measure the end-to-end speedup.")
    add_model_arguments(parser)
    kernels = parser.add_mutually_exclusive_group()
    kernels.add_argument("--optimized-dir", default=str(paths.OPTIMIZED_DIR),
                         help="the folder with manifest.json and the kernels (default optimized_kernels/)")
    kernels.add_argument("--starters", action="store_true",
                         help="verify the starter kernels of each kernel type in the model's plan, at its shapes "
                              "and dtype (profiling the model first when the workspace has no plan of it)")
    parser.add_argument("--include-slower", action="store_true",
                        help="also plug in kernels the loop measured as slower than PyTorch at their shapes")
    parser.add_argument("--workspace", default=str(paths.WORKSPACE),
                        help="where the plan is read (or written by --starters) and verify_report.json written "
                             "(default workspace/)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile timings (slow on CPU)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    workspace = Path(args.workspace)
    try:
        loaded = models.load_model(**load_model_keywords(args))
        plan, plan_note = read_model_plan(workspace / profiler.PLAN_FILE, loaded)
        optimized_dir = Path(args.optimized_dir)
        if args.starters:
            optimized_dir, plan, plan_note = starters_of_plan(loaded, workspace, plan, plan_note, console)
        plugin.load_kernels(optimized_dir)    # a missing or broken manifest fails before any timing
        report = verify(loaded, optimized_dir, compile_backend=None if args.no_compile else args.compile_backend,
                        plan=plan, plan_note=plan_note, include_slower=args.include_slower)
    except (models.ModelLoadError, plugin.PlugInError) as error:
        print(f"verify.py: {error}", file=sys.stderr)
        return EXIT_ERROR
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
        console.print(f"{escape(plan_note)}: profiling {escape(loaded.name)} first")
        _, plan = profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=workspace)
        plan_note = f"{_plan_source(workspace / profiler.PLAN_FILE, plan)}, profiled now"
    folder = write_starter_manifest(plan, workspace / STARTER_MANIFEST_DIR)
    console.print(f"the starter kernels of {len(plan['entries'])} kernel types, at the plan's shapes "
                  f"({plan['dtype']}): {folder / paths.MANIFEST_NAME}")
    return folder, plan, plan_note


def write_starter_manifest(plan: dict, folder: Path) -> Path:
    """A manifest of the starter kernels/<type>.py of each planned kernel type, at the plan's shapes and dtype.

    It is written to folder/manifest.json; the folder is returned, to plug in as an optimized_kernels folder is.
    """
    entries = {f"{entry['rank']}_{entry['kernel_type']}":
               plugin.manifest_entry(entry, paths.starter_path(entry["kernel_type"])) for entry in plan["entries"]}
    if not entries:
        raise plugin.PlugInError(f"the plan of {plan['model']} has no kernel type AutoKernel has a kernel for, "
                                 "so there is nothing to plug in")
    plugin.write_manifest(folder / paths.MANIFEST_NAME, entries)
    return folder


def verify(loaded: models.LoadedModel, optimized_dir: str | Path, *, compile_backend: str | None,
           plan: dict | None, plan_note: str, include_slower: bool = False) -> dict:
    """Run, time, plug in, run and time again; the report as plain data (shares from `plan`, this model's)."""
    model, inputs = loaded.model, loaded.inputs
    timer = _Timer(inputs, on_gpu=loaded.device.type == "cuda")
    with torch.no_grad():
        expected = model(*inputs)
        timer.run("eager", model)
        if compile_backend:
            timer.run("compile", torch.compile(model, backend=compile_backend))
        plugin.plug_in(model, optimized_dir, include_slower=include_slower)
        actual = model(*inputs)          # the counted run; it also checks the module routes
        routing = plugin.router_of(model).summary()
        timer.run("ours", model)
        compiled = timer.run("ours_compile", torch.compile(model, backend=compile_backend)) if compile_backend else None
    allowed = plugin.tolerance(expected)
    error = plugin.output_error(expected, actual)
    compiled_error = None if compiled is None else plugin.output_error(expected, compiled)
    shares = {entry["kernel_type"]: entry["share"] for entry in plan["entries"]} if plan else {}
    for kernel in routing["kernels"]:
        kernel["share"] = shares.get(kernel["kernel_type"])
    return {
        "model": loaded.name, "device": str(loaded.device), "dtype": str(loaded.dtype).removeprefix("torch."),
        "optimized_dir": str(optimized_dir),
        "left_out_slower": {} if include_slower else plugin.slower_than_pytorch(optimized_dir),
        "plan": plan_note if plan else f"{plan_note}: shares unknown (run profile.py on this model)",
        "replaced_share": sum({k["kernel_type"]: k["share"] or 0.0 for k in routing["kernels"] if k["hits"]}.values())
                          if shares else None,
        **routing,
        "correctness": {"max_error": error, "compiled_max_error": compiled_error, "tolerance": allowed,
                        "passed": error <= allowed and (compiled_error is None or compiled_error <= allowed),
                        "definition": ERROR_DEFINITION},
        "latency_ms": timer.latency_ms, "latency_errors": timer.errors, "speedups": _speedups(timer.latency_ms),
        "timings_meaningful": timer.on_gpu, "compile_backend": compile_backend,
    }


class _Timer:
    """Runs and times each variant of the model; one that fails (a model torch.compile rejects) is noted, not raised."""

    def __init__(self, inputs: tuple, on_gpu: bool):
        self.inputs = inputs
        self.on_gpu = on_gpu
        self.latency_ms: dict[str, float | None] = {}
        self.errors: dict[str, str] = {}

    def run(self, label: str, model):
        """The output of a first call (which compiles a compiled variant), then the median latency; None on failure."""
        try:
            output = model(*self.inputs)
            self.latency_ms[label] = timing.median_latency_ms(lambda: model(*self.inputs), self.on_gpu)
            return output
        except Exception as exc:     # any compiler error is a finding to report, not a crash
            self.latency_ms[label] = None
            self.errors[label] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return None


def _speedups(latencies: dict) -> dict:
    """Each of our latencies against eager and against torch.compile of the original: baseline / ours."""
    return {f"{ours}_vs_{base}": latencies[base] / latencies[ours]
            for ours in ("ours", "ours_compile") for base in ("eager", "compile")
            if latencies.get(ours) and latencies.get(base)}


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


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def print_report(report: dict, console: Console) -> None:
    """The report as two tables (kernels, latencies) and the verdict; messages are escaped, not read as markup."""
    kernels = Table(title=f"Optimized kernels plugged into {report['model']} ({report['dtype']}, {report['device']})")
    for column in ("kernel", "hits", "fallbacks", "share of model time", "main fallback reason"):
        kernels.add_column(column, justify="right" if column in ("hits", "fallbacks") else "left",
                           no_wrap=column != "main fallback reason")
    for kernel in report["kernels"]:
        reasons = kernel["fallback_reasons"]
        kernels.add_row(kernel["name"], str(kernel["hits"]), str(kernel["fallbacks"]), _percent(kernel["share"]),
                        escape(next(iter(reasons), "-")))
    console.print(kernels)
    for name, speedup in report["left_out_slower"].items():
        console.print(f"[yellow]{escape(name)} left out: the loop measured it at {speedup:.2f}x PyTorch at its own "
                      "shapes, so it could only slow the model (--include-slower plugs it in anyway)[/yellow]")
    console.print(escape(report["plan"]))
    if report["replaced_share"] is not None:
        console.print(f"the kernels that took calls cover {_percent(report['replaced_share'])} of the profiled time")
    for route in report["module_routes"]:
        for rejection in route["rejections"]:
            console.print(f"[yellow]module {escape(route['path'])} ({route['class']}) not routed as "
                          f"{escape(rejection)}[/yellow]")
    if not any(kernel["hits"] for kernel in report["kernels"]):
        console.print("[yellow]no call reached an optimized kernel: the model ran entirely in PyTorch[/yellow]")

    latency = report["latency_ms"]
    timings = Table(title="End-to-end latency per forward pass (median)")
    for column in ("variant", "ms", "vs eager", "vs torch.compile"):
        timings.add_column(column, justify="left" if column == "variant" else "right")
    names = {"eager": "PyTorch eager", "compile": "torch.compile", "ours": "AutoKernel", "ours_compile":
             "AutoKernel + torch.compile"}
    for label, name in names.items():
        if label not in latency:
            continue
        ms = latency[label]
        vs_eager, vs_compile = (report["speedups"].get(f"{label}_vs_{base}") for base in ("eager", "compile"))
        timings.add_row(name, f"{ms:.3f}" if ms is not None else f"failed: {escape(report['latency_errors'][label])}",
                        f"{vs_eager:.3g}x" if vs_eager else "-", f"{vs_compile:.3g}x" if vs_compile else "-")
    console.print(timings)
    if not report["timings_meaningful"]:
        console.print("[bold yellow]CPU run through Triton's interpreter: wall-clock timings, NOT MEANINGFUL"
                      "[/bold yellow]")
    elif report["speedups"].get("ours_vs_eager", 1.0) < 1.0:
        console.print(f"[bold yellow]the model is SLOWER with these kernels ({report['speedups']['ours_vs_eager']:.2f}x "
                      "eager): keep running PyTorch's own path for it[/bold yellow]")
    check = report["correctness"]
    verdict = "[bold green]PASS[/bold green]" if check["passed"] else "[bold red]FAIL[/bold red]"
    compiled = (f", {check['compiled_max_error']:.3g} under torch.compile"
                if check["compiled_max_error"] is not None else "")
    console.print(f"end-to-end error check: {verdict}: max error {check['max_error']:.3g}{compiled} "
                  f"(tolerance {check['tolerance']:g}; {check['definition']})")


if __name__ == "__main__":
    sys.exit(main())
