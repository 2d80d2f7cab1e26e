"""End to end on a GPU: every model, in every mode, PyTorch's best against AutoKernel's best (verify.py --starters).

    python benchmarks/end_to_end.py models run OUT_DIR [--only NAME ...] [--timeout 900] [--no-overhead]
    python benchmarks/end_to_end.py models summarize OUT_DIR > table.md

`run` calls verify.py once per model in a child process (one model's crash or hang costs only
its row), in fp16, with the starter kernels at the model's profiled shapes, and appends each
report to OUT_DIR/reports.json and the console output to OUT_DIR/verify.log as it goes.
`summarize` turns reports.json into the markdown table committed under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT  # noqa: E402
HF_GQA = ["--hf", "llama", "--model-arg", "hidden_size=2048", "--model-arg", "intermediate_size=5632",
          "--model-arg", "num_hidden_layers=8", "--model-arg", "num_attention_heads=16",
          "--model-arg", "num_key_value_heads=4", "--model-arg", "max_position_embeddings=4096",
          "--input-shape", "4,1024", "--overhead"]
# name -> verify.py arguments (fp16, the starter kernels, the model's own default inputs unless named)
MODELS = {
    "smoke: tiny llama": ["models/llama.py", "--model-arg", "config=tiny", "--overhead"],
    "llama 1x512": ["models/llama.py", "--overhead"],
    "llama 4x1024": ["models/llama.py", "--model-arg", "batch=4", "--model-arg", "seq=1024", "--overhead"],
    "gpt2 1x512": ["models/gpt2.py", "--overhead"],
    "bert 1x512": ["models/bert.py", "--overhead"],
    "hf llama GQA 4x1024": HF_GQA,
}


def run(out: Path, names: list[str], timeout_s: float, stop_after_s: float, overhead: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    reports_path, log_path = out / "reports.json", out / "verify.log"
    reports = json.loads(reports_path.read_text()) if reports_path.exists() else {}
    env = {**os.environ, "COLUMNS": "220", "PYTHONUNBUFFERED": "1"}
    begun = time.monotonic()
    for name in names:
        if time.monotonic() - begun > stop_after_s:
            print(f"== {name}: not started, past --stop-after {stop_after_s:g} s", flush=True)
            continue
        workspace = Path("/tmp/autokernel_e2e") / name.replace(" ", "_").replace(":", "")
        args = [arg for arg in MODELS[name] if overhead or arg != "--overhead"]
        cmd = [sys.executable, "verify.py", *args, "--dtype", "float16", "--starters", "--workspace", str(workspace)]
        started = time.monotonic()
        print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
        with log_path.open("a") as log:
            log.write(f"\n== {name}: {' '.join(cmd[1:])}\n")
            log.flush()
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        report_file = workspace / "verify_report.json"
        report = json.loads(report_file.read_text()) if report_file.exists() and code != "timeout" else None
        reports[name] = {"exit": code, "seconds": round(time.monotonic() - started, 1), "report": report}
        reports_path.write_text(json.dumps(reports, indent=1))
        print(f"   exit {code} in {reports[name]['seconds']} s: "
              f"{report['verdict']['summary'] if report else 'no report'}", flush=True)
        failed = [v["variant"] for v in (report or {}).get("variants", {}).values() if v["failed"]
                  and not v["failed"].startswith("nothing routed")]
        if name.startswith("smoke") and (code != 0 or failed):
            print(f"the smoke run failed (exit {code}, variants failed: {failed}): stopping", flush=True)
            break
    print(summarize(reports))


def _ms(variants: dict, name: str) -> str:
    variant = variants.get(name)
    if not variant or variant["ms"] is None:
        return "-"
    return f"{variant['ms']:.3f} ±{variant['latency']['spread'] * 50:.0f}%"


def summarize(reports: dict) -> str:
    lines = ["| model | eager | compile | compile + CUDA graphs | AutoKernel | AK + compile | AK + compile + CUDA graphs "
             "| PyTorch's best | AutoKernel's best | best / best | handed to the user | routed (eager / compiled) "
             "| graph breaks, all routed (compile, CUDA graphs) | all-routed vs sum of parts: eager / CUDA graphs | max error |",
             "|" + "---|" * 15]
    for name, entry in reports.items():
        report = entry["report"]
        if report is None:
            lines.append(f"| {name} | exit {entry['exit']} |" + " |" * 14)
            continue
        variants, verdict = report["variants"], report["verdict"]
        table = report["route_table"]
        routed = (f"{sum(r['calls'] for r in table if r['route_eager'])} / "
                  f"{sum(r['calls'] for r in table if r['route_compiled'])} of {sum(r['calls'] for r in table)}")
        overhead = report.get("overhead") or {}
        all_routed = [variants.get("ours_compile"), (overhead.get("cudagraphs") or {}).get("routed")]
        breaks = ", ".join("-" if v is None or v.get("graph_breaks") is None else
                           f"{v['graph_breaks']} ({v['graphs']} graph{'s' * (v['graphs'] != 1)})" for v in all_routed)
        over = " / ".join(f"{overhead[m]['overhead']:+.1%}" if overhead.get(m, {}).get("overhead") is not None
                          else "-" for m in ("eager", "cudagraphs"))
        glue = (overhead.get("router_glue") or {}).get("share_of_routed_eager")
        over += f" (router glue {glue:.1%})" if glue is not None else ""
        theirs, ours = verdict["pytorch_best"], verdict["autokernel_best"]
        ratio = f"{verdict['speedup']:.3f}" if verdict["speedup"] else "-"
        handed = f"{verdict['use']} ({'faster' if verdict['faster'] else 'no gain'})"
        lines.append(f"| {name} | " + " | ".join(_ms(variants, v) for v in (
            "eager", "compile", "cudagraphs", "ours", "ours_compile", "ours_cudagraphs")) +
            f" | {theirs['name'] if theirs else '-'} | {ours['name'] if ours else '-'} | {ratio} | {handed} | "
            f"{routed} | {breaks} | {over} | {report['correctness']['max_error']:.2g} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("out", type=Path)
    run_parser.add_argument("--only", nargs="*", choices=list(MODELS), help="these models only (default: all)")
    run_parser.add_argument("--timeout", type=float, default=900, help="seconds one model may take")
    run_parser.add_argument("--stop-after", type=float, default=float("inf"),
                            help="start no new model after this many seconds")
    run_parser.add_argument("--no-overhead", action="store_true",
                            help="skip verify's routing-overhead measurement (--overhead): the verdicts without it")
    summary_parser = commands.add_parser("summarize")
    summary_parser.add_argument("out", type=Path)


def main(args: argparse.Namespace) -> None:
    if args.command == "run":
        run(args.out, args.only or list(MODELS), args.timeout, args.stop_after, overhead=not args.no_overhead)
    else:
        print(summarize(json.loads((args.out / "reports.json").read_text())))

