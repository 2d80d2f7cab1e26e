"""The judge against every attack kernel in tests/attacks, every starter, and its own wall time.

    python benchmarks/judge.py attacks [--only attacks,runner,starters,wall] [--old-judge 7d5c824] [--out DIR]

1. Every attack kernel (tests/attacks/, expectations in tests/attacks/expected.py) through the
   real bench.py in the loop's quick screen, and those rejected in timing or needing a GPU in the
   full verdict too, and the forged-result attack through runner.run_bench as the loop runs it.
   Each must be rejected at its stage with its message.
2. The runner's sandbox, as the loop judges (runner.run_bench): the attacks on what surrounds the judge
   (RUNNER_ATTACKS: daemons that outlive it) must be a CRASH; the named attacks (the GPU-only ones by
   default) rejected as through bench.py; starters (softmax, matmul, and the CUDA rmsnorm) PASS with
   meaningful timings, so the PID namespace, Landlock and the worker's own write layer leave the GPU usable.
3. Every starter through bench.py: each must PASS (float16, full verdict).
4. The judge's wall time: one plain full run (no torch.compile) and one quick run of each
   memory-bound starter, as a loop experiment costs. With --old-judge REF (a git commit, needs the
   repository's .git), the judge of that commit is timed the same way, for before/after.
Run it on the GPU; on CPU it runs too, and skips the GPU-only attacks. Writes one markdown log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from autokernel.core.paths import starter_path
from autokernel.judge import runner, source_check
from autokernel.kernel_types import registry
from benchmarks.common import RESULTS, ROOT, dated_path, run_info, run_judge, write_text

ATTACK_DIR = ROOT / "tests" / "attacks"
ATTACKS, RUNNER_ATTACKS, BENCH_ARGS, REGION_DIRS, SOURCE_CHECK_ONLY = (
    runpy.run_path(str(ATTACK_DIR / "expected.py"))[name]
    for name in ("ATTACKS", "RUNNER_ATTACKS", "BENCH_ARGS", "REGION_DIRS", "SOURCE_CHECK_ONLY"))
# As tests/test_attacks.py judges them: the runtime guards behind the source check (which refuses most attack files
# for their runpy alone), and SOURCE_CHECK_ONLY, which only the source check sees, with it on.
CHECK_OFF = {source_check.SOURCE_CHECK_ENV: "0"}
RUNNER_STARTERS = [("softmax", starter_path("softmax")), ("matmul", starter_path("matmul")),
                   ("cuda rmsnorm", ROOT / "kernels" / "cuda" / "rmsnorm.py")]
MEMORY_BOUND = ["softmax", "layernorm", "rmsnorm", "cross_entropy", "rotary_embedding", "reduce"]


def bench(kernel: Path, *extra: str, judge_root: Path = ROOT, env: dict | None = None) -> tuple[dict, float]:
    result, wall, proc = run_judge(kernel, *extra, judge_root=judge_root,
                                   env={**os.environ, "PYTHONPATH": str(judge_root),
                                        "AUTOKERNEL_REGION_DIRS": str(ATTACK_DIR / REGION_DIRS), **(env or {})})
    if result is None:
        return {"correctness": "NO RESULT", "failed_stage": None, "message": proc.stderr[-400:]}, wall
    return result, wall


def one_line(text, limit=160) -> str:
    return " ".join(str(text).split())[:limit].replace("|", "/")


def says(result: dict, message: str | tuple) -> bool:
    """Whether the verdict's message holds the expected piece (or one of them: tests/attacks/expected.py)."""
    return any(piece in str(result["message"]) for piece in (message if isinstance(message, tuple) else (message,)))


def attack_rows(on_gpu: bool, names: set[str] | None = None) -> tuple[list[str], int]:
    lines = ["## Attacks", "", "| attack | mode | expected | got | stage | ok | message |",
             "|---|---|---|---|---|---|---|"]
    bad = 0
    for name, (correctness, stages, message, where) in ATTACKS.items():
        if names and name not in names:
            continue
        stages = stages if isinstance(stages, tuple) else (stages,)
        stage = " or ".join(stages)
        if where == "gpu" and not on_gpu:
            lines.append(f"| {name} | - | {correctness} at {stage} | skipped: needs a GPU | | | |")
            continue
        for mode in ("quick", "full") if "timing" in stages or where == "gpu" else ("quick",):
            result, _ = bench(ATTACK_DIR / f"{name}.py", "--seed", "1234", *BENCH_ARGS.get(name, []),
                              *(["--quick"] if mode == "quick" else []), env={} if name in SOURCE_CHECK_ONLY else CHECK_OFF)
            ok = result["correctness"] == correctness and result["failed_stage"] in stages and says(result, message)
            bad += not ok
            lines.append(f"| {name} | {mode} | {correctness} at {stage}: \"{message}\" | {result['correctness']} | "
                         f"{result['failed_stage']} | {'yes' if ok else 'NO'} | {one_line(result['message'])} |")
            print(lines[-1], flush=True)
    if names and "forge_result_at_import" not in names:
        return lines, bad
    with _environment(CHECK_OFF):
        result = runner.run_bench(ATTACK_DIR / "forge_result_at_import.py", shapes=[], dtype="float16",
                                  timeout_s=600, seed=7, extra_args=["--quick"]).to_json()
    ok = result["correctness"] == "CRASH"
    bad += not ok
    lines.append(f"| forge_result_at_import | runner.run_bench (the loop) | CRASH | {result['correctness']} | "
                 f"{result.get('failed_stage')} | {'yes' if ok else 'NO'} | {one_line(result['message'])} |")
    print(lines[-1], flush=True)
    return lines, bad


def runner_rows(on_gpu: bool, names: set[str] | None = None) -> tuple[list[str], int]:
    """Through runner.run_bench, the sandbox and all: what the loop itself would record."""
    lines = ["", "## Through the runner's sandbox (runner.run_bench, as the loop judges)", "",
             "| kernel | expected | got | ok | isolation | message or latency |", "|---|---|---|---|---|---|"]
    bad = 0
    sandbox = isolation()
    chosen = [(name, ATTACK_DIR / f"{name}.py", RUNNER_ATTACKS[name][0], RUNNER_ATTACKS[name][1])
              for name in RUNNER_ATTACKS]
    chosen += [(name, ATTACK_DIR / f"{name}.py", ATTACKS[name][0], ATTACKS[name][2]) for name in ATTACKS
               if (name in names if names else ATTACKS[name][3] == "gpu" and on_gpu)]
    chosen += [(name, path, "PASS", "") for name, path in RUNNER_STARTERS if on_gpu or "cuda" not in name]
    for name, path, correctness, message in chosen:
        started = time.monotonic()
        with _environment(CHECK_OFF if path.parent == ATTACK_DIR else {}):
            result = runner.run_bench(path, shapes=[], dtype="float16", timeout_s=900, seed=1234,
                                      extra_args=[*BENCH_ARGS.get(name, []), "--quick"]).to_json()
        ok = result["correctness"] == correctness and says(result, message)
        if correctness == "PASS":
            ok = ok and result.get("timings_meaningful") == on_gpu
        bad += not ok
        shown = (f"{result.get('latency_us') or 0:.1f} us, meaningful {result.get('timings_meaningful')}, "
                 f"{time.monotonic() - started:.0f} s" if result["correctness"] == "PASS" else one_line(result["message"]))
        lines.append(f"| {name} | {correctness} | {result['correctness']} | {'yes' if ok else 'NO'} | "
                     f"{sandbox} | {shown} |")
        print(lines[-1], flush=True)
    return lines, bad


@contextlib.contextmanager
def _environment(values: dict):
    """These variables in this process's environment for the block (the runner passes AUTOKERNEL_* on)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def isolation() -> str:
    """How the runner's sandbox isolates a child on this machine (PID namespace, Landlock), from one tiny child."""
    child = runner.run_child([sys.executable, "-c", "pass"], timeout_s=60, cwd=ROOT)
    proc = child.sandbox.get("proc") or "the machine's"
    return f"{child.sandbox.get('isolation')}; /proc: {proc}"


def starter_rows(names: set[str] | None = None) -> tuple[list[str], int]:
    lines = ["", "## Starters (float16, full verdict)", "",
             "| kernel | result | GPU us | us per call (host included) | judge's guard removed us | throughput | % peak | vs eager | speed of light | timed calls "
             "| wall s | load, stages and timing s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    bad = 0
    for name in (n for n in registry.REGISTRY if not names or n in names):
        result, wall = bench(starter_path(name))
        stages = ", ".join([f"load {result.get('load_seconds') or 0:.1f}"]
                           + [f"{s['stage']} {s['seconds']:.1f}" for s in result.get("stages", [])]
                           + [f"timing {result.get('timing_seconds') or 0:.1f}"])
        bad += result["correctness"] != "PASS"
        timings = result.get("timings") or [{}]
        lines.append(f"| {name} | {result['correctness']} {one_line(result.get('message') or '', 120)} | "
                     f"{result.get('latency_us') or 0:.1f} | {result.get('call_latency_us') or 0:.1f} | "
                     f"{timings[0].get('guard_us') or 0:.1f} | "
                     f"{result.get('throughput') or 0:.1f} "
                     f"{result.get('throughput_unit') or ''} | {result.get('pct_peak') or 0:.1f} | "
                     f"{result.get('speedup_vs_pytorch') or 0:.2f} | {one_line(result.get('speed_of_light'), 60)} | "
                     f"{timings[0].get('timed_calls', '-')} | {wall:.1f} | {stages} |")
        print(lines[-1], flush=True)
    return lines, bad


def wall_rows(label: str, judge_root: Path, names: set[str] | None = None) -> list[str]:
    lines = ["", f"## Judge wall time: {label}", "", "| kernel | full run s | result | quick run s | result |",
             "|---|---|---|---|---|"]
    for name in (n for n in MEMORY_BOUND if not names or n in names):
        full, full_s = bench(judge_root / "kernels" / f"{name}.py", judge_root=judge_root)
        quick, quick_s = bench(judge_root / "kernels" / f"{name}.py", "--quick", judge_root=judge_root)
        lines.append(f"| {name} | {full_s:.1f} | {full['correctness']} | {quick_s:.1f} | {quick['correctness']} |")
        print(lines[-1], flush=True)
    return lines


def old_judge(ref: str) -> Path | None:
    folder = Path(tempfile.mkdtemp(prefix="autokernel-old-judge-"))
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True)
    if archive.returncode != 0:
        print(f"cannot extract {ref}: {archive.stderr.decode()[:200]}")
        return None
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--old-judge", help="also time the judge of this git commit (before/after)")
    parser.add_argument("--old-judge-first", action="store_true",
                        help="time the old judge before this one (the first bench of a fresh machine pays for its "
                             "cold caches: alternate the order between runs)")
    parser.add_argument("--only", default="attacks,runner,starters,wall", help="which parts to run (comma-separated)")
    parser.add_argument("--names", default="", help="only these attacks / starters / kernels (comma-separated)")
    parser.add_argument("--shard", metavar="K/N",
                        help="only every N-th attack from the K-th (1-based): N processes judge the attacks side by "
                             "side within one device call, each writing its own log")


def main(args: argparse.Namespace) -> int:
    parts = set(args.only.split(","))
    names = set(filter(None, args.names.split(","))) or None
    shard = ""
    if args.shard:
        k, n = (int(part) for part in args.shard.split("/"))
        names = {name for i, name in enumerate(sorted(ATTACKS)) if i % n == k - 1 and (names is None or name in names)}
        shard = f"_shard{k}of{n}"
    on_gpu = torch.cuda.is_available()
    info = run_info("cpu-interpreter", on_gpu)
    lines = [f"# The judge against the attack kernels: {info.device}", "",
             f"date {info.date}, {info.versions()}; `python benchmarks/judge.py attacks`", ""]
    bad = 0
    if "attacks" in parts:
        attack_lines, bad = attack_rows(on_gpu, names)
        lines += attack_lines
    if "runner" in parts:
        runner_lines, failed = runner_rows(on_gpu, names)
        lines += runner_lines
        bad += failed
    if "starters" in parts:
        starter_lines, failed = starter_rows(names)
        lines += starter_lines
        bad += failed
    if "wall" in parts:
        judges = [("this judge (worker process, checked timed calls)", ROOT)]
        if args.old_judge and (old := old_judge(args.old_judge)):
            judges.insert(0 if args.old_judge_first else 1, (f"the judge of {args.old_judge}", old))
        for label, root in judges:
            lines += wall_rows(label, root, names)
    lines += ["", f"**{bad} unexpected outcomes.**"]
    name = "_".join(sorted(parts)) + (shard or ("_" + "-".join(sorted(names)) if names else ""))
    out = write_text(dated_path(args.out, info, f"judge_{name}.md"), "\n".join(lines) + "\n")
    print(f"wrote {out}: {bad} unexpected outcomes")
    return 1 if bad else 0

