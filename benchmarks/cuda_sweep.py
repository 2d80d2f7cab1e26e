"""A CUDA starter's tunables on a GPU: which settings reach copy bandwidth at cuda_check.py's shapes.

    python benchmarks/cuda_sweep.py kernels/cuda/softmax.py --try BLOCK_THREADS=1024,MAX_PACKS=4 --try ...

A CUDA starter's TUNABLES are #defines, so each setting is its own build: every variant (the
defaults, then each --try on top of them) is written to a temporary copy of the file with
`TUNABLES.update(...)` right after the dict, and all are built at once in separate processes
(nvcc is the slow part; the builds are cached by source hash, so the timing process only loads
them). Each variant is then checked against the reference and timed at the kernel type's rows of
benchmarks/cuda_check.py (TIMED_SHAPES, float16), against a device copy of the same tensor.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from autokernel import registry  # noqa: E402
from cuda_check import TIMED_SHAPES, load, median_us  # noqa: E402


def variant_source(source: str, overrides: dict) -> str:
    """The kernel file with TUNABLES updated right after its definition (before the build reads it)."""
    assign = next(node for node in ast.parse(source).body if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "TUNABLES" for t in node.targets))
    lines = source.splitlines(keepends=True)
    return "".join(lines[:assign.end_lineno]) + f"TUNABLES.update({overrides!r})\n" + "".join(lines[assign.end_lineno:])


def parse_try(text: str) -> dict:
    return {name: int(value) for name, value in (part.split("=") for part in text.split(","))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", help="a CUDA starter, like kernels/cuda/softmax.py")
    parser.add_argument("--try", dest="tries", action="append", default=[], help="NAME=VALUE,... on top of the defaults")
    args = parser.parse_args(argv)
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
    for (label, _), file, proc in zip(variants, files, builds):
        if proc.returncode:
            continue
        fn = load(file, f"variant_{file.stem}").kernel_fn
        cells = []
        for shape in TIMED_SHAPES[path.stem]:
            inputs = kt.make_inputs(shape, torch.float16, torch.Generator("cuda").manual_seed(0), "cuda")
            error = (fn(**inputs).float() - kt.reference(**inputs).float()).abs().max().item()
            x = inputs["x"]
            copy_to = torch.empty_like(x)
            ours, copy = median_us(lambda: fn(**inputs)), median_us(lambda: copy_to.copy_(x))
            of_copy = kt.bytes_moved(shape, x.element_size()) / ours / (2 * x.nbytes / copy)
            cells.append(f"{registry.format_shape(shape)} {ours:7.1f} us {of_copy:.2f}" + (" WRONG" if error > 0.05 else ""))
        print(f"{label:<36} " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
