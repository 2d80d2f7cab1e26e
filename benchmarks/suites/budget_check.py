"""Does the budget bind and the terminal stay clean? One short `autokernel optimize` and its `autokernel verify`.

    python benchmarks/loop.py budget-check --out DIR [--budget 2m] [--model models/llama.py]
                                           [--model-arg config=tiny ...]

In a fresh git repository holding a copy of the model file, `autokernel optimize MODEL --budget B` runs with this
checkout's package, then `autokernel verify` (the run's model) on the run's branch. Written to DIR: each command's
stdout and stderr, workspace/torch.log, state.json and the plan, and summary.json:
  - the run's wall time against its budget, and what its state says the time went to (profiling, baselines,
    experiments); whether the starters' autotuning was skipped for lack of budget (the run's line saying so);
  - the lines on the terminal (stdout and stderr of both commands) that look like torch's or Inductor's own
    (AUTOTUNE tables, warnings, tracebacks, glog-style "W1129 ..." records): there should be none;
  - verify's exit code and how many lines workspace/torch.log holds.
On a GPU this is the check of issue 38's items 5 and 7; on a CPU it runs too (timings mean nothing there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT  # noqa: E402

from autokernel.core.arguments import parse_duration  # noqa: E402

# What torch, Inductor and Triton print themselves, never AutoKernel: none of it should reach the terminal.
TORCH_LINE = re.compile(r"^(AUTOTUNE |\s*triton_\w+ \d|Traceback |\S+Warning: |[WEI]\d{4} \d\d:\d\d|strides: |dtypes: )")


def _run(cmd: list[str], cwd: Path, out: Path, name: str, timeout_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    began = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code, stdout, stderr = "timeout", expired.stdout or "", expired.stderr or ""
        stdout, stderr = [text.decode() if isinstance(text, bytes) else text for text in (stdout, stderr)]
    wall = time.monotonic() - began
    (out / f"{name}.stdout").write_text(stdout)
    (out / f"{name}.stderr").write_text(stderr)
    torch_lines = [line for line in (stdout + stderr).splitlines() if TORCH_LINE.match(line)]
    return {"command": " ".join(cmd[2:]), "exit": code, "wall_s": round(wall, 1), "torch_lines_on_terminal":
            len(torch_lines), "first_torch_lines": torch_lines[:10]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for the commands' output and summary.json")
    parser.add_argument("--budget", default="2m", help="the run's --budget (default 2m)")
    parser.add_argument("--model", default="models/llama.py", help="a model file of this repository")
    parser.add_argument("--model-arg", action="append", default=None, metavar="NAME=VALUE",
                        help="passed to optimize (default: config=tiny)")


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget_s = parse_duration(args.budget)
    work = Path(tempfile.mkdtemp(prefix="autokernel-budget-check-"))
    model = ROOT / args.model
    shutil.copy(model, work / model.name)
    (work / ".gitignore").write_text("workspace/\nresults.tsv\n")
    for step in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=check", "-c", "user.email=check@invalid", "commit", "-q", "-m", "model"]):
        subprocess.run(["git", *step], cwd=work, check=True)
    model_args = [flag for value in (args.model_arg or ["config=tiny"]) for flag in ("--model-arg", value)]
    cli = [sys.executable, "-m", "autokernel.cli"]
    optimize = _run([*cli, "optimize", model.name, *model_args, "--budget", args.budget, "--tag", "check"], work, out,
                    "optimize", budget_s + 600)
    subprocess.run(["git", "checkout", "-q", "autokernel/check"], cwd=work)
    verify = _run([*cli, "verify"], work, out, "verify", 900)
    workspace = work / "workspace"
    for name in ("torch.log", "state.json", "optimization_plan.json", "verify_report.json"):
        if (workspace / name).is_file():
            shutil.copy(workspace / name, out / name)
    state = json.loads((workspace / "state.json").read_text()) if (workspace / "state.json").is_file() else {}
    torch_log = workspace / "torch.log"
    summary = {"budget_s": budget_s, "optimize": optimize, "verify": verify,
               "over_budget_s": round(optimize["wall_s"] - budget_s, 1),
               "state_elapsed_s": state.get("elapsed_s"), "spent_s": state.get("spent_s"),
               "plan_caveats": state.get("plan_caveats"),
               "autotuning_skipped": "Inductor's autotuning was skipped" in (out / "optimize.stdout").read_text()
               + (out / "optimize.stderr").read_text(),
               "torch_log_lines": len(torch_log.read_text().splitlines()) if torch_log.is_file() else 0}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if optimize["exit"] == 0 and not (optimize["torch_lines_on_terminal"] or verify["torch_lines_on_terminal"]) \
        else 1
