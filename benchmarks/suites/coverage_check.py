"""Issue 11.4 on a GPU: the problem files that needed new coverage, our starter against eager and torch.compile.

    python benchmarks/kernels.py coverage-check [--problems sum_middle,max_middle,max_indices_middle,rmsnorm_dim1,...]

For each problem file in benchmarks/problems/ at its own shapes (float32): the starter kernel called
directly (kernels/<type>.py, the way the router calls it: the same reshapes and arguments), the
model in eager PyTorch, the model under torch.compile, and the model with the starter plugged in
by autokernel.plug_in (policy "all", at the shape the profiler would plan; "not routed" where
the router leaves the call to PyTorch). Each is timed with triton.testing.do_bench (median, L2
flushed before every call), and the starter's output is checked against eager (the largest error
of its floating tensors, and how many indices differ: they must be exact). Prints a markdown table
and, when $OUT is set, writes $OUT/coverage_check.json. Needs a GPU; about a minute on an H100.

max_middle computes torch.max(x, dim=1)[0] and max_indices_middle torch.max(x, dim=1)'s values and
indices: both are the reduce op max_dim, whose starter computes values and indices in one pass, as
eager and torch.compile do (the router runs it eagerly; inside torch.compile the pair is Inductor's,
so "plug_in" is the eager model with the kernel routed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from autokernel.core.paths import MANIFEST_NAME, starter_path
from autokernel.judge.candidate.worker import load_kernel
from autokernel.routing import plugin
from autokernel.routing.decisions import ALL
from autokernel.routing.manifest import write_manifest
from autokernel.routing.outputs import tensors_of
from benchmarks.common import do_bench_ms as bench_ms, env_out, load_problem, run_info, table_header, write_json

PROBLEMS = ["sum_middle", "max_middle", "max_indices_middle", "rmsnorm_dim1", "layernorm_last3"]


def starter_call(name: str, model, x: torch.Tensor):
    """(kernel type, the shape the profiler plans, a call of the starter computing the model's output)."""
    if name in ("sum_middle", "max_middle", "max_indices_middle"):
        fn = load_kernel(starter_path("reduce"))[0].kernel_fn
        op = "sum" if name == "sum_middle" else "max_dim"
        batch, reduced, inner = x.shape
        shape = {"O": batch, "R": reduced, "I": inner, "op": op}
        if name == "max_middle":                   # torch.max(x, dim=1)[0]: the values of the pair
            return "reduce", shape, lambda: fn(x, 1, op)[0]
        return "reduce", shape, lambda: fn(x, 1, op)
    if name == "rmsnorm_dim1":
        fn = load_kernel(starter_path("rmsnorm"))[0].kernel_fn
        channels = x.shape[1]
        ones = torch.ones(channels, device=x.device, dtype=x.dtype)
        shape = {"M": x.shape[0], "N": channels, "I": x[0, 0].numel()}
        return "rmsnorm", shape, lambda: fn(x.reshape(x.shape[0], channels, -1), ones, model.eps, 1).reshape(x.shape)
    if name == "layernorm_last3":
        fn = load_kernel(starter_path("layernorm"))[0].kernel_fn
        ln = model.ln
        n = ln.weight.numel()
        shape = {"M": x.numel() // n, "N": n}
        weight, bias = ln.weight.detach().reshape(n), ln.bias.detach().reshape(n)
        return "layernorm", shape, lambda: fn(x.reshape(-1, n), weight, bias, ln.eps).reshape(x.shape)
    raise ValueError(f"no starter call for {name}")


def errors(got, expected) -> tuple[float, int]:
    """(the largest abs error of the floating tensors, how many elements of the integer ones differ)."""
    pairs = list(zip(tensors_of(got), tensors_of(expected), strict=True))
    error = max((float((g - e).abs().max()) for g, e in pairs if e.is_floating_point()), default=0.0)
    return error, sum(int((g != e).sum()) for g, e in pairs if not e.is_floating_point())


def plugged_in(model, kernel_type: str, shape: dict, x: torch.Tensor, folder: Path):
    """The model with the starter plugged in (policy all), and how many calls of one forward it routed."""
    (folder / "1_k.py").write_text(starter_path(kernel_type).read_text())
    write_manifest(folder / MANIFEST_NAME, {"1_k": {
        "file": "1_k.py", "kernel_type": kernel_type, "rank": 1, "shapes": [shape], "dtypes": ["float32"],
        "best_speedup_vs_pytorch": 1.0}})
    plugin.plug_in(model, folder, policy=ALL)
    model(x)                                    # the resolution pass
    plugin.router_of(model).reset_stats()
    model(x)
    stats = {k["kernel_type"]: k["hits"] for k in plugin.router_of(model).summary()["kernels"]}
    return stats.get(kernel_type, 0)


def run(name: str) -> dict:
    problem = load_problem(name)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda().eval()
    (x,) = [t.cuda() for t in problem.get_inputs()]
    row = {"problem": name, "shape": list(x.shape), "dtype": "float32"}
    with torch.no_grad():
        kernel_type, shape, ours = starter_call(name, model, x)
        expected = model(x)
        max_abs_error, index_mismatches = errors(ours(), expected)
        row.update(kernel_type=kernel_type, planned_shape=shape, max_abs_error=max_abs_error,
                   index_mismatches=index_mismatches, output_scale=float(tensors_of(expected)[0].abs().max()))
        row["ours_us"] = bench_ms(ours) * 1e3
        row["eager_us"] = bench_ms(lambda: model(x)) * 1e3
        compiled = torch.compile(model)
        compiled(x)
        row["compile_us"] = bench_ms(lambda: compiled(x)) * 1e3
        with tempfile.TemporaryDirectory() as tmp:
            routed_model = problem.Model(*problem.get_init_inputs()).cuda().eval()
            routed_model.load_state_dict(model.state_dict())
            row["plug_in_hits"] = plugged_in(routed_model, kernel_type, shape, x, Path(tmp))
            row["plug_in_max_abs_error"], row["plug_in_index_mismatches"] = errors(routed_model(x), expected)
            row["plug_in_us"] = bench_ms(lambda: routed_model(x)) * 1e3
            plugin.unplug(routed_model)
    row["vs_eager"] = row["eager_us"] / row["ours_us"]
    row["vs_compile"] = row["compile_us"] / row["ours_us"]
    return row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problems", default=",".join(PROBLEMS))


def main(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("coverage_check: needs a CUDA GPU (the starters' timings under the CPU interpreter mean nothing)",
              file=sys.stderr)
        return 2
    rows = []
    for name in args.problems.split(","):
        try:
            rows.append(run(name))
        except Exception as exc:     # one problem's failure must not hide the others' figures
            rows.append({"problem": name, "error": f"{type(exc).__name__}: {exc}"})
        print(json.dumps(rows[-1]), flush=True)
    info = run_info()
    lines = [f"# issue 11.4 coverage: {info.device}, {info.versions()}, float32; do_bench median, L2 flushed", "",
             *table_header(["problem", "shape", "kernel", "max abs err (wrong indices)", "ours us", "eager us",
                            "compile us", "vs eager", "vs compile", "plug_in us (hits)"])]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | ERROR: {r['error'][:200]} |||||||||")
            continue
        lines.append(f"| {r['problem']} | {tuple(r['shape'])} | {r['kernel_type']} | {r['max_abs_error']:.2e} "
                     f"({r['index_mismatches'] + r['plug_in_index_mismatches']}) | "
                     f"{r['ours_us']:.1f} | {r['eager_us']:.1f} | {r['compile_us']:.1f} | {r['vs_eager']:.2f}x | "
                     f"{r['vs_compile']:.2f}x | {r['plug_in_us']:.1f} ({r['plug_in_hits']}) |")
    print("\n".join(lines))
    out = env_out("coverage_check.json")
    if out:
        write_json(out, {**info.as_dict(), "rows": rows}, indent=1)
    return 1 if any("error" in r for r in rows) else 0

