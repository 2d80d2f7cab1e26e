"""Experiments per hour with one GPU and with several: the same run of the built-in agent, --gpus 1 then --gpus N.

    python benchmarks/loop.py throughput [--gpus 2] [--budget 180] [--runs 1,2] [--out DIR]

Each run is `autokernel optimize models/llama.py --model-arg batch=4 --model-arg seq=1024 --dtype
float16 --top 3 --agent builtin --budget B` in a fresh git repository of its own (--workdir), with
Triton's and Inductor's caches of its own, so the second run compiles nothing the first one
compiled. The pace is measured over the loop alone (profiling and extraction excluded): the run's
Throughput in workspace/state.json gives the wall time with the workers up, each GPU's experiments
and busy time, and (several GPUs) each job's span in flight. Written to OUT: summary.json,
summary.md, and each run's log, results.tsv and state.json. The bar (issue 14): N=2 gives at least
1.8x the experiments per hour of one GPU; every kept result is judged alone on its GPU either way.
With several GPUs the jobs run side by side (a job's baseline on a GPU the other jobs cannot use),
so the figures beside the rate say how busy the GPUs were and how many jobs overlapped.
Two runs of 240 s and their start (profiling, the sandbox's GPU check) fit in about 9 minutes. For
longer runs, one per call: `--runs 1 --budget 480 --out DIR`, then `--runs 2 --budget 480 --out DIR`;
each run is saved as DIR/run_<gpus>gpu.json, and the summary is made from those there whenever both exist.
Runs longer than one call (the bar's 10 minutes), on a machine of 3+ GPUs, both runs side by side:
    python benchmarks/loop.py throughput --budget 600 --side-by-side --part first --stop-after 420 --out DIR
    python benchmarks/loop.py throughput --budget 600 --side-by-side --part rest --out DIR   # next call
(the first part stops each run cleanly; the second resumes it on the same warm machine, whose
.multi_gpu_work/ folder of ignored files is kept between calls).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, dated_path, run_info, write_json, write_text

MODEL_ARGS = ["--model-arg", "batch=4", "--model-arg", "seq=1024", "--dtype", "float16", "--top", "3"]
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def one_run(gpus: int, budget_s: int, out: Path, *, part: str = "whole", stop_after_s: float | None = None,
            devices: str | None = None, work_root: Path | None = None) -> dict | None:
    """One optimize run in a fresh repository; its pace and outcome (None after a first part).

    part "whole" runs it to its end in a fresh temporary repository. A run longer than one device
    call goes in two: part "first" starts it in work_root/<gpus>gpu and stops it cleanly (SIGINT, as
    Ctrl-C) after stop_after_s; part "rest", in a later call on the same warm machine, continues it
    with `optimize --resume` to its end. The budget and the loop's wall time count only the time
    the run was up, so the pace reads as one run's. devices: CUDA_VISIBLE_DEVICES for this run, so
    that a one-GPU run and a two-GPU run can go side by side on a machine with three or more."""
    if part == "whole":
        work = Path(tempfile.mkdtemp(prefix=f"autokernel-{gpus}gpu-"))
    else:
        work = (work_root or ROOT / ".multi_gpu_work") / f"{gpus}gpu"
    if part != "rest":
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=work, check=True)
        (work / ".gitignore").write_text("results.tsv\nworkspace/\n__pycache__/\n")
        subprocess.run(GIT + ["add", "-A"], cwd=work, check=True)
        subprocess.run(GIT + ["commit", "-q", "-m", "init"], cwd=work, check=True)
    elif not (work / "workspace" / "state.json").exists():
        raise SystemExit(f"no first part to continue in {work}: run --part first before --part rest")
    caches = work.parent / f"{work.name}-caches"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TRITON_CACHE_DIR": str(caches / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor")}
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = devices
    cli = [sys.executable, "-c", "import sys; from autokernel.cli import main; sys.exit(main())", "--workdir", str(work)]
    if part == "rest":
        command = cli + ["optimize", "--resume"]
    else:
        command = cli + ["optimize", str(ROOT / "models" / "llama.py"), *MODEL_ARGS, "--agent", "builtin",
                         "--budget", f"{budget_s}s", "--gpus", str(gpus), "--tag", f"bench{gpus}"]
    started = time.monotonic()
    with open(out / f"{gpus}gpu{'' if part == 'whole' else '_' + part}.log", "w") as log:
        process = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            process.wait(timeout=stop_after_s if part == "first" else budget_s + 120)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)          # a clean stop: the state says where to go on
            process.wait(timeout=120)
    if part == "first":
        return None
    completed = process
    wall = time.monotonic() - started
    for name in ("results.tsv", "workspace/state.json"):
        if (work / name).exists():
            shutil.copyfile(work / name, out / f"{gpus}gpu_{Path(name).name}")
    state = json.loads((work / "workspace" / "state.json").read_text())
    sys.path.insert(0, str(ROOT))
    from autokernel.search import results

    rows = [row for row in results.read_rows(work / "results.tsv")]
    throughput = state["throughput"]
    loop_s = throughput["wall_s"]
    per_gpu = {label: {"experiments": use["experiments"], "busy_s": round(use["busy_s"], 1),
                       "idle_s": round(max(0.0, loop_s - use["busy_s"]), 1),
                       "experiments_per_hour": round(use["experiments"] * 3600 / loop_s, 1) if loop_s else None}
               for label, use in sorted(throughput["gpus"].items())}
    experiments = sum(use["experiments"] for use in per_gpu.values())
    busy_s = sum(use["busy_s"] for use in per_gpu.values())
    # When each job was in flight (several GPUs only): how many ran side by side at most.
    spans = [(span["started_s"], span["ended_s"] if span.get("ended_s") is not None else loop_s)
             for span in (throughput.get("jobs") or {}).values()]
    overlap = max((sum(start <= moment < end for start, end in spans) for moment, _ in spans), default=1)
    baselines = [row for row in rows if row["status"] == "baseline"]
    shutil.rmtree(caches, ignore_errors=True)
    return {"gpus": gpus, "exit_code": completed.returncode, "command_wall_s": round(wall, 1),
            "loop_wall_s": round(loop_s, 1), "experiments": experiments,
            "experiments_per_hour": round(experiments * 3600 / loop_s, 1) if loop_s else None,
            "per_gpu": per_gpu, "gpu_idle_s": round(sum(u["idle_s"] for u in per_gpu.values()), 1),
            "gpu_busy_fraction": round(busy_s / (loop_s * len(per_gpu)), 3) if loop_s and per_gpu else None,
            "baselines": len(baselines), "most_jobs_in_flight": overlap,
            "job_spans": throughput.get("jobs") or {},
            "rows": len(rows), "kept": sum(row["status"] == "keep" for row in rows),
            "crashes": sum(row["correctness"] == "CRASH" for row in rows),
            "jobs": [job["kernel_type"] for job in state["jobs"]], "stopped_because": state.get("stopped_because"),
            "best_per_job": [entry.get("speedup_over_baseline") for entry in state.get("finished", [])],
            "workdir": str(work)}


def markdown(summary: dict) -> str:
    lines = [f"# Experiments per hour, 1 GPU against {summary['gpus']} ({summary['device']}, {summary['date']})", "",
             f"torch {summary['torch']}, Triton {summary['triton']}; `{' '.join(MODEL_ARGS)}`, built-in agent, "
             f"budget {summary['budget_s']} s per run (profiling included; the pace is over the loop alone).", "",
             "| run | loop wall (s) | experiments | experiments/hour | GPUs busy | per GPU (exp/h, idle s) "
             "| baselines (jobs started) | most jobs at once | kept | crashes |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for run in summary["runs"]:
        gpus = "; ".join(f"{label}: {use['experiments_per_hour']}/h, idle {use['idle_s']}"
                         for label, use in run["per_gpu"].items())
        lines.append(f"| --gpus {run['gpus']} | {run['loop_wall_s']} | {run['experiments']} | "
                     f"{run['experiments_per_hour']} | {run['gpu_busy_fraction']:.0%} | {gpus} | {run['baselines']} | "
                     f"{run['most_jobs_in_flight']} | {run['kept']} | {run['crashes']} |")
    lines += ["", f"Jobs: {', '.join(summary['runs'][0]['jobs'])}. Experiments are the candidates judged (the "
              f"baselines are not counted); GPUs busy is the GPUs' judging time over the loop's wall time."]
    lines += ["", f"**Speedup in experiments per hour: {summary['speedup']}x** (bar: 1.8x). "
              f"Same jobs in both runs: {summary['same_jobs']}."]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--budget", type=int, default=180, help="seconds per run, profiling included (default 180)")
    parser.add_argument("--runs", help="which runs to make now, as GPU counts (default: 1 and --gpus)")
    parser.add_argument("--out", default=None, help="output folder (default benchmarks/results/<date>_multi_gpu)")
    parser.add_argument("--part", choices=["whole", "first", "rest"], default="whole",
                        help="a run longer than one device call: 'first' starts it and stops it cleanly after "
                             "--stop-after seconds, 'rest' (a later call, same machine) resumes it to its end")
    parser.add_argument("--stop-after", type=float, default=None, help="seconds the first part runs")
    parser.add_argument("--side-by-side", action="store_true",
                        help="make the runs at once, each on its own GPUs (1 GPU and --gpus need 1 + --gpus of them)")


def main(args: argparse.Namespace) -> int:
    if args.part == "first" and args.stop_after is None:
        args.parser.error("--part first needs --stop-after SECONDS")
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < args.gpus:
        print(f"needs {args.gpus} CUDA GPUs, this machine has {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    info = run_info()
    out = Path(args.out or dated_path(RESULTS, info, "multi_gpu"))
    out.mkdir(parents=True, exist_ok=True)
    counts = [int(n) for n in args.runs.split(",")] if args.runs else [1, args.gpus]
    devices: dict[int, str | None] = dict.fromkeys(counts)
    if args.side_by_side:
        if sum(counts) > torch.cuda.device_count():
            print(f"side by side, runs of {counts} GPUs need {sum(counts)}; this machine has "
                  f"{torch.cuda.device_count()}", file=sys.stderr)
            return 2
        first = 0
        for gpus in counts:
            devices[gpus] = ",".join(str(first + i) for i in range(gpus))
            first += gpus

    def make(gpus: int) -> None:
        print(f"--gpus {gpus} ({args.part}, devices {devices[gpus] or 'all'}): budget {args.budget} s ...", flush=True)
        run = one_run(gpus, args.budget, out, part=args.part, stop_after_s=args.stop_after, devices=devices[gpus])
        if run is not None:
            write_json(out / f"run_{gpus}gpu.json", run)
            print(json.dumps(run, indent=1), flush=True)

    if args.side_by_side:
        with ThreadPoolExecutor(len(counts)) as pool:
            list(pool.map(make, counts))
    else:
        for gpus in counts:
            make(gpus)
    if args.part == "first":
        print(f"first parts stopped after {args.stop_after} s; continue with --part rest", flush=True)
        return 0
    saved = {path.name: json.loads(path.read_text()) for path in out.glob("run_*gpu.json")}
    single, multi = saved.get("run_1gpu.json"), saved.get(f"run_{args.gpus}gpu.json")
    if single is None or multi is None:
        print(f"one of the two runs is not in {out} yet: no summary", flush=True)
        return 0
    speedup = (round(multi["experiments_per_hour"] / single["experiments_per_hour"], 2)
               if single["experiments_per_hour"] and multi["experiments_per_hour"] else None)
    summary = {**info.as_dict(), "gpus": args.gpus, "budget_s": args.budget, "runs": [single, multi], "speedup": speedup,
               "same_jobs": single["jobs"] == multi["jobs"]}
    write_json(out / "summary.json", summary)
    write_text(out / "summary.md", markdown(summary))
    print(markdown(summary))
    return 0 if speedup is not None else 1

