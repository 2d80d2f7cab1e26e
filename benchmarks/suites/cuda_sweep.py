"""A CUDA starter's tunables on a GPU: which settings reach copy bandwidth at cuda_check.py backend's shapes.

    python benchmarks/cuda_check.py sweep kernels/cuda/softmax.py --try BLOCK_THREADS=1024,MAX_PACKS=4 --try ...
    python benchmarks/cuda_check.py sweep kernels/cuda/softmax.py --shape M=4096,N=2048 --shape M=256,N=32768 \
        --repeat 5 --try PACKED_ROW=1 --try LOCAL_MAX=1 --try PACKED_ROW=1,LOCAL_MAX=1

A CUDA starter's TUNABLES are #defines, so each setting is its own build: every variant (the
defaults, then each --try on top of them; a value is a number, or True / False) is written to a
temporary copy of the file with `TUNABLES.update(...)` right after the dict, and all are built at
once in separate processes (nvcc is the slow part; the builds are cached by source hash, so the
timing process only loads them). Each variant is then checked against the reference and timed at
the kernel type's rows of benchmarks/cuda_check.py backend (TIMED_SHAPES, float16), or at the --shape rows
alone, against a device copy of the same tensor. With --repeat R the variants are timed R times in
turn (all of them, then all again), so drift over the run touches each alike; each cell gives the
median fraction of copy bandwidth over the rounds and its range.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from autokernel.kernel_types import registry
from benchmarks.common import ROOT, do_bench_us as median_us, load_module as load, median_range
from benchmarks.suites.cuda_backend import TIMED_SHAPES


def variant_source(source: str, overrides: dict) -> str:
    """The kernel file with TUNABLES updated right after its definition (before the build reads it)."""
    assign = next(node for node in ast.parse(source).body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "TUNABLES" for t in node.targets))
    lines = source.splitlines(keepends=True)
    return "".join(lines[:assign.end_lineno]) + f"TUNABLES.update({overrides!r})\n" + "".join(lines[assign.end_lineno:])


def parse_value(text: str) -> int | bool:
    """A tunable's value: True or False (any case), else an integer."""
    word = text.strip().lower()
    return word == "true" if word in ("true", "false") else int(text)


def parse_try(text: str) -> dict:
    return {name.strip(): parse_value(value) for name, value in (part.split("=") for part in text.split(","))}


def parse_shape(text: str) -> dict:
    return {name.strip(): int(value) for name, value in (part.split("=") for part in text.split(","))}


def summary(fractions: list[float]) -> str:
    """The median fraction of copy bandwidth over the rounds, with its range when there are several."""
    return median_range(fractions, ".2f")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", help="a CUDA starter, like kernels/cuda/softmax.py")
    parser.add_argument("--try", dest="tries", action="append", default=[], help="NAME=VALUE,... on top of the defaults")
    parser.add_argument("--shape", dest="shapes", action="append", default=[], type=parse_shape,
                        help="time this row alone, like M=256,N=32768 (repeatable; default: TIMED_SHAPES')")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of timing over all the variants")


def main(args: argparse.Namespace) -> int:
    path = (ROOT / args.kernel).resolve()
    source = path.read_text()
    folder = Path(tempfile.mkdtemp(prefix="cuda_sweep_"))
    variants = [("defaults", {})] + [(text, parse_try(text)) for text in args.tries]
    files = []
    for index, (_, overrides) in enumerate(variants):
        files.append(folder / f"{path.stem}_v{index}.py")
        files[-1].write_text(variant_source(source, overrides))
    builds = [subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
                                f"import importlib.util as u; s = u.spec_from_file_location('v', {str(f)!r}); "
                                "s.loader.exec_module(u.module_from_spec(s))"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for f in files]
    for (label, _), proc in zip(variants, builds):
        output, _ = proc.communicate()
        if proc.returncode:
            print(f"build FAILED {label}: {output.strip().splitlines()[-1][:200] if output.strip() else ''}")
    kt = registry.get(path.stem)
    shapes = args.shapes or TIMED_SHAPES[path.stem]
    built = [(label, load(file, f"variant_{file.stem}").kernel_fn)
             for (label, _), file, proc in zip(variants, files, builds) if not proc.returncode]
    inputs = [kt.make_inputs(shape, torch.float16, torch.Generator("cuda").manual_seed(0), "cuda") for shape in shapes]
    wrong = {(label, i) for label, fn in built for i, cell in enumerate(inputs)
             if (fn(**cell).float() - kt.reference(**cell).float()).abs().max().item() > 0.05}
    fractions = {(label, i): [] for label, _ in built for i in range(len(shapes))}
    times = {(label, i): [] for label, _ in built for i in range(len(shapes))}
    for round_index in range(args.repeat):
        if args.repeat > 1:
            print(f"timing round {round_index + 1} of {args.repeat}", file=sys.stderr, flush=True)
        for label, fn in built:
            for i, (shape, cell) in enumerate(zip(shapes, inputs)):
                x = cell["x"]
                copy_to = torch.empty_like(x)
                ours, copy = median_us(lambda: fn(**cell)), median_us(lambda: copy_to.copy_(x))
                times[label, i].append(ours)
                fractions[label, i].append(kt.bytes_moved(shape, x.element_size()) / ours / (2 * x.nbytes / copy))
    for label, _ in built:
        cells = [f"{registry.format_shape(shape)} {statistics.median(times[label, i]):7.1f} us "
                 f"{summary(fractions[label, i])}" + (" WRONG" if (label, i) in wrong else "")
                 for i, shape in enumerate(shapes)]
        print(f"{label:<36} " + " | ".join(cells), flush=True)
    return 0

