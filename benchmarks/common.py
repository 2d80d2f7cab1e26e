"""What every benchmark shares: timing, the run's header, output files, loading files, tables, the entry points.

Each entry point (benchmarks/kernels.py, end_to_end.py, loop.py, cuda_check.py, judge.py) is a table of
subcommands; each subcommand is a module of benchmarks/suites/ with add_arguments(parser) and main(args).
Only the chosen subcommand's module is imported: several set the Triton interpreter up as they load
(on a machine without a GPU), which must not leak into another subcommand's run. torch and Triton are
imported lazily here for the same reason, and so that nothing needs a GPU to import.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
PROBLEMS = ROOT / "benchmarks" / "problems"


# ---------------------------------------------------------------------------------------------- timing
def do_bench_ms(fn, warmup: int = 25, rep: float = 100) -> float:
    """GPU time of fn in ms: triton.testing.do_bench's median, the L2 cache flushed before every call."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def do_bench_us(fn, warmup: int = 25, rep: float = 100) -> float:
    return do_bench_ms(fn, warmup, rep) * 1e3


def host_median_ms(fn, calls: int) -> float:
    """The median wall time of `calls` calls in ms: the interpreter's path, where do_bench means nothing."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def timer_ms(on_gpu: bool, warmup: int = 25, rep: float = 100, cpu_calls: int = 1):
    """fn -> ms: do_bench's median on a GPU, else the median wall time of cpu_calls calls."""
    if on_gpu:
        return lambda fn: do_bench_ms(fn, warmup, rep)
    return lambda fn: host_median_ms(fn, cpu_calls)


def latency_stats(times_ms: list[float]) -> dict:
    """The median over repeats (used for every ratio and verdict) and their spread, in microseconds."""
    return {"latency_us": statistics.median(times_ms) * 1e3,
            "latency_min_us": min(times_ms) * 1e3, "latency_max_us": max(times_ms) * 1e3}


def median_range(values: list[float], spec: str = ".2f") -> str:
    """The median of repeated figures, with their range when there are several."""
    text = format(statistics.median(values), spec)
    return text + (f" ({min(values):{spec}}-{max(values):{spec}})" if len(values) > 1 else "")


# ---------------------------------------------------------------------------------------------- the run's header
@dataclass(frozen=True)
class RunInfo:
    """What every result names: the device, the date, the torch and Triton versions."""
    device: str
    date: str
    torch: str
    triton: str
    on_gpu: bool

    @property
    def slug(self) -> str:
        """The device as a file name's part: "NVIDIA-H100-80GB-HBM3"."""
        return self.device.split(" (")[0].replace(" ", "-")

    def versions(self) -> str:
        return f"torch {self.torch}, triton {self.triton}"

    def as_dict(self) -> dict:
        return {"device": self.device, "date": self.date, "torch": self.torch, "triton": self.triton}


def run_info(cpu_device: str = "cpu (interpreter: timings meaningless)", on_gpu: bool | None = None) -> RunInfo:
    """This machine's RunInfo; cpu_device names it where no GPU is used (on_gpu: whether one is, default: any)."""
    import torch
    import triton

    gpu = torch.cuda.is_available() if on_gpu is None else on_gpu
    return RunInfo(torch.cuda.get_device_name() if gpu else cpu_device, datetime.date.today().isoformat(),
                   torch.__version__, triton.__version__, gpu)


def dated_path(out: str | Path, info: RunInfo, name: str) -> Path:
    """OUT/<date>_<device>_<name>: how results in benchmarks/results/ are named."""
    return Path(out) / f"{info.date}_{info.slug}_{name}"


# ---------------------------------------------------------------------------------------------- output files
def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_json(path: str | Path, data, indent: int = 2) -> Path:
    return write_text(path, json.dumps(data, indent=indent) + "\n")


def env_out(name: str, given: str | Path | None = None) -> Path | None:
    """`given`, else $OUT/name when $OUT is set (the GPU machine's output folder), else None."""
    if given:
        return Path(given)
    return Path(os.environ["OUT"]) / name if os.environ.get("OUT") else None


# ---------------------------------------------------------------------------------------------- tables
def fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def table_header(columns: list[str]) -> list[str]:
    """A markdown table's first two lines."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


# ---------------------------------------------------------------------------------------------- loading files
def load_module(path: str | Path, name: str, register: bool = False):
    """Import a file as module `name` (registered in sys.modules where torch.compile must find it by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_problem(name: str, divisor: int = 1, kept: frozenset = frozenset()):
    """A problem file of benchmarks/problems/ (Model, get_inputs, get_init_inputs). With divisor > 1 its upper-case
    integer sizes (but those in `kept`) are divided by it, at least 2: the same steps at CPU sizes."""
    module = load_module(PROBLEMS / f"{name}.py", f"problem_{name}", register=True)
    if divisor > 1:
        for key, value in list(vars(module).items()):
            if key.isupper() and isinstance(value, int) and key not in kept:
                setattr(module, key, max(2, value // divisor))
    return module


def run_judge(kernel: str | Path, *extra: str, judge_root: Path = ROOT, env: dict | None = None,
              timeout: float | None = None) -> tuple[dict | None, float, subprocess.CompletedProcess]:
    """bench.py of judge_root on a kernel file in its own process: (its JSON result or None, wall s, the process)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(judge_root / "bench.py"), "--kernel", str(kernel), *extra,
                               "--json-out", str(out)], cwd=judge_root, capture_output=True, text=True, env=env,
                              timeout=timeout)
        wall = time.monotonic() - started
        return (json.loads(out.read_text()) if out.exists() else None), wall, proc


# ---------------------------------------------------------------------------------------------- entry points
def suite(module: str):
    return importlib.import_module(f"benchmarks.suites.{module}")


def summary_line(module: str) -> str:
    """The first paragraph of a suite's docstring, read from its file: listing the subcommands imports none."""
    source = (ROOT / "benchmarks" / "suites" / f"{module}.py").read_text()
    return " ".join((ast.get_docstring(ast.parse(source)) or "").split("\n\n")[0].split())


def build_parser(description: str, subcommands: dict[str, str], chosen: str | None,
                 prog: str | None = None) -> argparse.ArgumentParser:
    """The entry point's parser (subcommand -> suite module); only the chosen one's module is imported."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    for name, module_name in subcommands.items():
        sub = commands.add_parser(name, help=summary_line(module_name),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == chosen:
            module = suite(module_name)
            sub.description = module.__doc__
            module.add_arguments(sub)
            sub.set_defaults(run=module.main, parser=sub)
    return parser


def run_subcommand(description: str, subcommands: dict[str, str], argv: list[str] | None = None,
                   prog: str | None = None) -> int:
    """Parse argv (default: the command line) and run the chosen subcommand's main(args): its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    args = build_parser(description, subcommands, chosen, prog).parse_args(argv)
    return args.run(args) or 0
