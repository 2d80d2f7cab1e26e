"""The judge's verdict: written once (rich text or JSON, a RESULT line, the runner's pipe), and its watchdog.

Exit code: 0 PASS, 1 FAIL, 2 CRASH, 3 TIMEOUT (EXIT_CODES). The message quotes the kernel's errors, so what looks
like a secret is taken out before it is written (autokernel/sandbox/redact.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import torch

from autokernel.core.contracts import TIMEOUT, VERDICTS
from autokernel.judge import limits
from autokernel.judge.stages import ON_GPU
from autokernel.kernel_types import registry
from autokernel.sandbox import redact

EXIT_CODES = {verdict: code for code, verdict in enumerate(VERDICTS)}     # PASS 0, FAIL 1, CRASH 2, TIMEOUT 3


class Watchdog:
    """Ends the process with a TIMEOUT result when a stage overruns; works even if a GPU kernel hangs."""

    def __init__(self, report, stop_worker):
        self.report, self.stop_worker = report, stop_worker
        self.stage, self.deadline = None, None
        threading.Thread(target=self._watch, daemon=True).start()

    @contextlib.contextmanager
    def limit(self, stage: str, seconds: float):
        self.stage, self.deadline = stage, time.monotonic() + seconds
        try:
            yield
        finally:
            self.deadline = None

    def _watch(self):
        while True:
            time.sleep(0.1)
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline:
                self.report(TIMEOUT, self.stage, f"stage '{self.stage}' exceeded its time limit",
                            before_write=self.stop_worker)
                os._exit(EXIT_CODES[TIMEOUT])


class Report:
    """Collects the run's outcome and writes it out once, as rich text, a RESULT line and JSON."""

    def __init__(self, args, nonce: str | None):
        self.args = args
        self.nonce = nonce
        self.started = time.monotonic()
        self.result = {"kernel_type": None, "correctness": None, "failed_stage": None, "message": "",
                       "seed": args.seed, "device": torch.cuda.get_device_name() if ON_GPU else "cpu",
                       "dtype": args.dtype, "timings_meaningful": ON_GPU, "stages": [],
                       "timing_shapes": [registry.format_shape(s) for s in args.shape]}
        self.lock = threading.Lock()
        self.written = False

    def stage_done(self, name: str, cases: int, seconds: float):
        self.result["stages"].append({"stage": name, "cases": cases, "seconds": round(seconds, 3)})

    def finish(self, correctness: str, failed_stage: str | None = None, message: str = "", timing: dict | None = None,
               before_write=None):
        with self.lock:
            if self.written:
                return
            self.written = True
            if before_write is not None:
                before_write()
            # The message quotes the kernel's errors: no secret it read passes on (a person or an agent reads it).
            self.result.update(correctness=correctness, failed_stage=failed_stage, message=redact.scrub(message),
                               wall_seconds=round(time.monotonic() - self.started, 3))
            for key in ("throughput", "throughput_unit", "latency_us", "call_latency_us", "pct_peak", "bound",
                        "speedup_vs_pytorch",
                        "speedup_vs_compile", "pytorch_latency_us", "compile_latency_us", "peak_vram_mb",
                        "speed_of_light", "compiled", "launch_floor_us", "limits"):
                self.result[key] = (timing or {}).get(key)
            self.result["timings"] = (timing or {}).get("timings", [])
            self._write()

    def _write(self):
        r = self.result
        # The nonce (from the runner, never seen by the worker) marks the verdict as this judge's; the digests
        # of the judge's own sources let the runner check that the judge that ran is the run's.
        from autokernel.judge import judge_files
        marks = {"nonce": self.nonce, judge_files.JUDGE_SOURCES: judge_files.compiled()} if self.nonce else {}
        written = json.dumps({**r, **marks}, indent=2)
        if self.args.result_fd is not None:
            # The runner's pipe: only this process holds its write end (the worker was started without it).
            with os.fdopen(self.args.result_fd, "w") as verdict:
                verdict.write(written)
        if self.args.json_out:
            Path(self.args.json_out).write_text(written)
        if self.args.json:
            print(json.dumps(r, indent=2), flush=True)
        else:
            print_summary(r)
        fields = ["kernel_type", "correctness", "throughput", "throughput_unit", "latency_us", "pct_peak",
                  "speedup_vs_pytorch", "peak_vram_mb", "seed"]
        line = " ".join(f"{k}={_fmt(r[k])}" for k in fields)
        stage = f" failed_stage={r['failed_stage'].replace(' ', '_')}" if r["failed_stage"] else ""
        print(f"RESULT {line}{stage} timings_meaningful={r['timings_meaningful']}", flush=True)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_summary(r: dict):
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=False, highlight=False)
    console.print(f"[bold]bench.py[/bold] {r['kernel_type']} on {r['device']}  seed={r['seed']}  "
                  f"(rerun with --seed {r['seed']} to reproduce)")
    stages = Table(title="correctness", show_edge=False)
    for col in ("stage", "cases", "seconds", "result"):
        stages.add_column(col)
    for s in r["stages"]:
        stages.add_row(s["stage"], str(s["cases"]), f"{s['seconds']:.2f}", "[green]pass[/green]")
    if r["failed_stage"]:
        stages.add_row(r["failed_stage"], "", "", f"[red]{r['correctness']}[/red]")
    console.print(stages)
    if r["message"]:
        # The message may quote the kernel: no markup, and no line breaks of rich's own, so none of its text
        # can turn into markup or start a line that looks like RESULT.
        console.print(f"{r['correctness']} in stage '{r['failed_stage']}': {r['message']}", style="red",
                      markup=False, soft_wrap=True)
    if r["timings"]:
        title = "timing (median, L2 flushed)" if r["timings_meaningful"] else \
            "timing: CPU interpreter, NOT MEANINGFUL (no GPU)"
        table = Table(title=title, show_edge=False)
        for col in ("shape", "latency us", "throughput", "% peak", "pytorch us", "speedup", "compile us"):
            table.add_column(col)
        for t in r["timings"]:
            table.add_row(t["shape"], f"{t['latency_us']:.1f}", f"{t['throughput']:.1f} {t['unit']}",
                          _fmt(t["pct_peak"]),
                          f"{t['pytorch_latency_us']:.1f}", f"{t['pytorch_latency_us'] / t['latency_us']:.2f}x",
                          _fmt(t["compile_latency_us"]))
        console.print(table)
        console.print(f"speed of light: {r['speed_of_light']}")
        for line in limits.describe(r["limits"]):
            console.print(line, markup=False, soft_wrap=True)     # kernel names come from the kernel's process

