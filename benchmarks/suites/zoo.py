"""The GPU gate: `verify --starters` over a zoo of real architectures, one table of verdicts (the first call of a GPU session).

    python benchmarks/end_to_end.py zoo run OUT [--only NAME ...] [--jobs 8] [--size full|tiny] [--dtype float16]
    python benchmarks/end_to_end.py zoo summarize OUT > table.md

The zoo: the shipped models; Hugging Face transformers built from their configs (GPT-2, BERT, LLaMA with
grouped-query attention, Qwen2, T5); torchvision's ResNet-18, MobileNetV3, EfficientNet-B0 and ViT-B/16; an LSTM,
a Mamba-style selective scan and torch.nn's Transformer encoder on a padded batch (benchmarks/zoo/sequence.py); a
DLRM-style recommender (benchmarks/zoo/recsys.py); convolutions, pooling, a ResNet and a deep narrow MLP
as KernelBench writes them (benchmarks/zoo/cnn.py); and a sample of benchmarks/problems.

Each model is verified by its own `autokernel verify` process (verify.py), `--jobs` of them side by side so that
their compilations overlap; every timing in them (verify's, and the judge's when a region's pick judges its
variants) holds one file lock (autokernel/core/gpu_lock.py), so no two timings share the GPU. A model's row is its
verdict, or the crash: the exit code and the last lines of what it printed. Each verify is given the model's
limit less LIMIT_MARGIN_S as its --time-limit, so that a slow model ends with a verdict (some routes left unchecked)
rather than being killed at the limit. OUT/zoo.json holds every row (with the
whole report), OUT/verify.log every model's output, each line stamped with its second (where the time went),
OUT/table.md the table. Exit code 0 when every model ended with a verdict, 1 otherwise.
`--size tiny` runs the same zoo at the CPU tests' sizes (tests/test_zoo.py runs a part of it on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from autokernel.core import gpu_lock
from benchmarks.common import ROOT

TAIL_LINES = 40
# The line of a crash's output that names it: "KeyError: relu_1", "torch.AcceleratorError: CUDA error: ...".
ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Failed|Interrupt)\b:?")


@dataclass(frozen=True)
class Entry:
    """A zoo model: verify's arguments at the GPU's size and at the CPU tests' ("tiny"); what it needs installed; its
    dtype where it is not the run's (--dtype)."""
    full: tuple[str, ...]
    tiny: tuple[str, ...]
    needs: str | None = None
    dtype: str | None = None


def _args(*pairs: str, **model_args) -> tuple[str, ...]:
    return (*pairs, *(x for name, value in model_args.items() for x in ("--model-arg", f"{name}={value}")))


def _hf(arch: str, shape: str, **fields) -> tuple[str, ...]:
    return _args("--hf", arch, "--input-shape", shape, **fields)


def _zoo_file(file: str, arch: str, size: str) -> tuple[str, ...]:
    return _args(f"benchmarks/zoo/{file}", arch=arch, size=size)


TINY_LM = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
# The longest first (as the H200 timed them in session 16's third gate, 360 s down to 30 s with eight side by side;
# the three of session 17 as session 18's gate timed them), so that the last to finish are short. Left out to fit the gate's nine minutes (session 16: 3.6-4.0 thousand seconds
# of verify runs in 21 models overran it twice): Hugging Face GPT-2 in float16 (the shipped GPT-2 is float16, and Hugging
# Face's runs here in float32), the GRU (the LSTM's twin) and problems/vit_block.py (ViT-B/16's block).
ZOO: dict[str, Entry] = {
    "efficientnet_b0": Entry(_zoo_file("vision.py", "efficientnet_b0", "full"),
                             _zoo_file("vision.py", "efficientnet_b0", "tiny"), "torchvision"),
    # float32, as a model is built: its GEMMs are where our tf32x3 engine is outside Inductor's reach (H200, session
    # 12: 1.18x torch.compile + CUDA graphs).
    "hf gpt2 1x512 float32": Entry(_hf("gpt2", "1,512", n_layer=4),
                                   _hf("gpt2", "1,16", vocab_size=128, n_embd=64, n_layer=2, n_head=4), "transformers",
                                   dtype="float32"),
    "bert (shipped) 1x512": Entry(("models/bert.py",), _args("models/bert.py", config="tiny", seq=16)),
    "mamba-style scan": Entry(_zoo_file("sequence.py", "mamba", "full"), _zoo_file("sequence.py", "mamba", "tiny")),
    "hf bert 1x512": Entry(_hf("bert", "1,512", num_hidden_layers=6), _hf("bert", "1,16", **TINY_LM), "transformers"),
    "hf t5 1x512": Entry(_hf("t5", "1,512", num_layers=4),
                         _hf("t5", "1,16", vocab_size=128, d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4),
                         "transformers"),
    "mobilenet_v3_small": Entry(_zoo_file("vision.py", "mobilenet_v3_small", "full"),
                                _zoo_file("vision.py", "mobilenet_v3_small", "tiny"), "torchvision"),
    "gpt2 (shipped) 1x512": Entry(("models/gpt2.py",), _args("models/gpt2.py", config="tiny", seq=16)),
    "vit_b_16": Entry(_zoo_file("vision.py", "vit", "full"), _zoo_file("vision.py", "vit", "tiny"), "torchvision"),
    "kb: resnet18": Entry(_zoo_file("cnn.py", "resnet18", "full"), _zoo_file("cnn.py", "resnet18", "tiny")),
    "resnet18": Entry(_zoo_file("vision.py", "resnet18", "full"), _zoo_file("vision.py", "resnet18", "tiny"),
                      "torchvision"),
    "llama (shipped) 1x512": Entry(("models/llama.py",), _args("models/llama.py", config="tiny")),
    "dlrm recommender": Entry(_args("benchmarks/zoo/recsys.py", size="full"),
                              _args("benchmarks/zoo/recsys.py", size="tiny")),
    "problem: gemm_sigmoid_rowsum": Entry(("benchmarks/problems/gemm_sigmoid_rowsum.py",),
                                          ("benchmarks/problems/gemm_sigmoid_rowsum.py",), dtype="float32"),
    "hf llama GQA 1x1024": Entry(
        _hf("llama", "1,1024", hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
            num_key_value_heads=4, vocab_size=32000),
        _hf("llama", "1,16", num_key_value_heads=2, **TINY_LM), "transformers"),
    "kb: deep narrow mlp": Entry(_zoo_file("cnn.py", "deep_narrow_mlp", "full"),
                                 _zoo_file("cnn.py", "deep_narrow_mlp", "tiny")),
    "hf qwen2 GQA 1x512": Entry(
        _hf("qwen2", "1,512", hidden_size=896, intermediate_size=4864, num_hidden_layers=4, num_attention_heads=14,
            num_key_value_heads=2, vocab_size=32000),
        _hf("qwen2", "1,16", num_key_value_heads=2, **TINY_LM), "transformers"),
    "kb: conv+bn+relu": Entry(_zoo_file("cnn.py", "conv_bn_relu", "full"), _zoo_file("cnn.py", "conv_bn_relu", "tiny")),
    "kb: depthwise conv": Entry(_zoo_file("cnn.py", "depthwise", "full"), _zoo_file("cnn.py", "depthwise", "tiny")),
    "problem: layernorm_last3": Entry(("benchmarks/problems/layernorm_last3.py",),
                                      ("benchmarks/problems/layernorm_last3.py",)),
    "kb: maxpool": Entry(_zoo_file("cnn.py", "maxpool", "full"), _zoo_file("cnn.py", "maxpool", "tiny")),
    "lstm": Entry(_zoo_file("sequence.py", "lstm", "full"), _zoo_file("sequence.py", "lstm", "tiny")),
    # Added in session 17 from the held-out survey (each found a bug on the CPU), placed by their time in session
    # 18's gate: T5-small's encoder-decoder at four layers each (the --hf loader gave it no decoder tokens, 222 s),
    # a DLRM-style recommender (embedding bags and a batched matmul, 159 s), and here, with the short ones,
    # torch.nn's Transformer encoder on a padded batch (a nested tensor: the profile failed; 33 s).
    "torch encoder, padded 8x128": Entry(_zoo_file("sequence.py", "encoder", "full"),
                                         _zoo_file("sequence.py", "encoder", "tiny")),
}


# Seconds of a model's limit kept for verify's own start and end around its --time-limit (the sandbox, the report).
LIMIT_MARGIN_S = 30


def command(name: str, size: str, dtype: str, workspace: Path, timeout_s: float | None = None) -> list[str]:
    """verify --starters on the entry; with a timeout, verify is asked to end with a verdict inside it."""
    entry = ZOO[name]
    limit = [] if timeout_s is None else ["--time-limit", f"{max(timeout_s - LIMIT_MARGIN_S, 1):.0f}"]
    return [sys.executable, str(ROOT / "verify.py"), *(entry.full if size == "full" else entry.tiny),
            "--dtype", entry.dtype or dtype, "--starters", "--workspace", str(workspace), *limit]


def missing(name: str) -> str | None:
    """The package the entry needs that this machine lacks, if any."""
    needs = ZOO[name].needs
    if needs is None:
        return None
    try:
        __import__(needs)
    except ImportError:
        return needs
    return None


def verify_one(name: str, size: str, dtype: str, timeout_s: float, env: dict) -> dict:
    """One model through verify: its row (exit code, seconds, report, the last lines it printed) and its output."""
    if missing(name):
        return {"name": name, "exit": None, "skipped": f"needs {missing(name)}", "seconds": 0, "report": None,
                "tail": [], "output": ""}
    workspace = Path(tempfile.mkdtemp(prefix="autokernel-zoo-"))
    cmd = command(name, size, dtype, workspace, timeout_s)
    started = time.monotonic()
    code, lines, output = _run_stamped(cmd, env, timeout_s, started)
    report_file = workspace / "verify_report.json"
    report = json.loads(report_file.read_text()) if report_file.is_file() and code != "timeout" else None
    return {"name": name, "exit": code, "seconds": round(time.monotonic() - started, 1), "report": report,
            "tail": [line for line in lines if line.strip()][-TAIL_LINES:], "output": output,
            "command": " ".join(cmd[1:])}


def _run_stamped(cmd: list[str], env: dict, timeout_s: float, started: float) -> tuple[int | str, list[str], str]:
    """Run cmd: its exit code ("timeout" when it ran past timeout_s and was killed), its output's lines, and the same
    output with each line stamped with the seconds since `started` (where a model's verify spends its time shows)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        os.killpg(proc.pid, signal.SIGKILL)
    timer = threading.Timer(timeout_s, kill)
    timer.start()
    lines, stamped = [], []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            stamped.append(f"[{time.monotonic() - started:6.1f} s] {line}")
        proc.wait()
    finally:
        timer.cancel()
    return ("timeout" if killed.is_set() else proc.returncode), lines, "".join(stamped)




def job_environment(base, lock: Path, gpu: int | None, side_by_side: int) -> dict[str, str]:
    """One verify run's environment: its GPU's timing lock, its GPU, and its share of the machine's CPUs for
    Inductor's compile workers (gpu_lock.compile_threads). Inductor reads the same variable for max-autotune's
    precompile threads (16 in session 15, where it was unset; 2 then 1
    after): the region starters set those to every CPU since (autokernel/profile/regions/inductor.py,
    _precompile_threads), so what session 16's gates show of the pool's size (ViT-B/16 profiled in 154 s with pools
    of 2, 108 s in session 15 without a pool) is mixed with that. A TORCHINDUCTOR_COMPILE_THREADS the caller set is
    kept."""
    return {gpu_lock.COMPILE_THREADS_VARIABLE: gpu_lock.compile_threads(side_by_side), **base, "COLUMNS": "200", "PYTHONUNBUFFERED": "1",
            "AUTOKERNEL_GPU_TIMING_LOCK": str(lock.resolve()),
            **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {})}


def run(out: Path, names: list[str], *, jobs: int, size: str, dtype: str, timeout_s: float,
        budget_s: float = float("inf"), gpus: int = 1) -> int:
    """`jobs` verify runs side by side on each of `gpus` GPUs (CUDA_VISIBLE_DEVICES), each GPU's timings under a lock
    of its own; 0 when every model ended with a verdict."""
    out.mkdir(parents=True, exist_ok=True)
    locks = [out / (f"gpu{gpu}_timing.lock" if gpus > 1 else "gpu_timing.lock") for gpu in range(gpus)]
    for lock in locks:
        lock.touch()
    free: queue.Queue = queue.Queue()
    for slot in range(jobs * gpus):
        free.put(slot % gpus)
    rows: dict[str, dict] = {}
    log_lock = threading.Lock()
    begun = time.monotonic()

    def one(name: str) -> None:
        gpu = free.get()
        env = job_environment(os.environ, locks[gpu], gpu if gpus > 1 else None, jobs * gpus)
        left = budget_s - (time.monotonic() - begun)
        try:
            if left < 30:        # the table must be written inside the call's own limit
                row = {"name": name, "exit": "not started (past --budget)", "seconds": 0, "report": None,
                       "tail": [], "output": ""}
            else:
                row = verify_one(name, size, dtype, min(timeout_s, left), env)
        finally:
            free.put(gpu)
        with log_lock:
            rows[name] = row
            with (out / "verify.log").open("a") as log:
                log.write(f"\n== {name} ({row['seconds']} s, exit {row['exit']}): {row.get('command', '')}\n")
                log.write(row.pop("output"))
            (out / "zoo.json").write_text(json.dumps([rows[n] for n in names if n in rows], indent=1))
            print(f"[{time.monotonic() - begun:5.0f} s] {name}: {verdict_of(row)}", flush=True)

    load_before = os.getloadavg()[0]
    with ThreadPoolExecutor(max_workers=jobs * gpus) as pool:
        list(pool.map(one, names))
    table = summarize([rows[n] for n in names]) + "\n" + host_line(load_before, os.getloadavg()[0])
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0 if all(row["report"] is not None or row.get("skipped") for row in rows.values()) else 1


def host_line(load_before: float, load_after: float) -> str:
    """The machine under the table: the same verifies ran twice as long on a host with a slower CPU side (session
    27's gate), which cuts end-to-end checks short at verify's time limit, so a reader needs to know the host."""
    model = "an unnamed CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"host: {os.cpu_count()} CPUs ({model}); load average {load_before:.1f} at the start, "
            f"{load_after:.1f} at the end")


def verdict_of(row: dict) -> str:
    if row.get("skipped"):
        return f"skipped ({row['skipped']})"
    report = row["report"]
    if report is None:
        named = [line.strip() for line in row["tail"] if ERROR_LINE.match(line.strip())]
        return f"NO VERDICT (exit {row['exit']}): " + (named[-1] if named else " / ".join(row["tail"][-2:]))
    return report["verdict"]["summary"]


def dropped_of(row: dict) -> list[str]:
    """Each part verify dropped, with its reason: from the report, and the starters it could not make."""
    report = row["report"] or {}
    parts = [f"{d.get('stage')}: {d.get('unit')}: {d.get('reason')}" for d in report.get("dropped") or []]
    parts += [line.strip() for line in row.get("tail", []) if line.startswith("no starter for")]
    return parts


def _ms(brief: dict | None) -> str:
    return f"{brief['name']} {brief['ms']:.3f} ms" if brief and brief.get("ms") is not None else "-"


def summarize(rows: list[dict]) -> str:
    lines = ["| model | verdict | exit | s | PyTorch's best | AutoKernel's best | handed over | best / best "
             "| dropped parts |", "|" + "---|" * 9]
    for row in rows:
        report = row["report"]
        dropped = "; ".join(part.replace("|", "/")[:160] for part in dropped_of(row)) or "-"
        if report is None:
            lines.append(f"| {row['name']} | {verdict_of(row).replace('|', '/')[:300]} | {row['exit']} | "
                         f"{row['seconds']} | - | - | - | - | {dropped} |")
            continue
        verdict = report["verdict"]
        ratio = f"{verdict['speedup']:.3f}" if verdict.get("speedup") else "-"
        lines.append(f"| {row['name']} | {verdict['summary'].replace('|', '/')} | {row['exit']} | {row['seconds']} "
                     f"| {_ms(verdict.get('pytorch_best'))} | {_ms(verdict.get('autokernel_best'))} "
                     f"| {verdict['use_code']} | {ratio} | {dropped} |")
    ended = sum(row["report"] is not None for row in rows if not row.get("skipped"))
    ran = sum(not row.get("skipped") for row in rows)
    lines.append(f"\n{ended} of {ran} models ended with a verdict.")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run")
    run_parser.add_argument("out", type=Path)
    run_parser.add_argument("--only", nargs="*", choices=list(ZOO), help="these models only (default: all)")
    run_parser.add_argument("--jobs", type=int, default=8, help="verify runs side by side on each GPU (default 8)")
    run_parser.add_argument("--gpus", type=int, default=1, help="GPUs to spread the models over (default 1)")
    run_parser.add_argument("--size", choices=("full", "tiny"), default="full")
    run_parser.add_argument("--dtype", default="float16")
    run_parser.add_argument("--timeout", type=float, default=480, help="seconds one model may take")
    run_parser.add_argument("--budget", type=float, default=540,
                            help="seconds for the whole zoo: no model starts, or runs on, past it (default 540)")
    summary_parser = commands.add_parser("summarize")
    summary_parser.add_argument("out", type=Path)


def main(args: argparse.Namespace) -> int:
    if args.command == "run":
        return run(args.out, args.only or list(ZOO), jobs=args.jobs, size=args.size, dtype=args.dtype,
                   timeout_s=args.timeout, budget_s=args.budget, gpus=args.gpus)
    print(summarize(json.loads((args.out / "zoo.json").read_text())))
    return 0
