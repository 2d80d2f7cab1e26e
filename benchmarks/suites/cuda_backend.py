"""The CUDA C++ backend on a GPU: build, judge, anti-cheat and speed, in about four minutes.

    python benchmarks/cuda_check.py backend --out benchmarks/results/cuda_check_h100.json [--skip-attacks]

1. Builds every CUDA kernel file below (the starters in kernels/cuda/, the CUDA attack kernels in
   tests/attacks/) in parallel, through autokernel/judge/cuda_build.py, so the judge's runs find them cached;
   each build's seconds (or its compile error) are reported.
2. Judges them with the real bench.py: each starter must PASS the full verdict, each attack must be
   rejected at its stage with its message (tests/attacks/expected.py). The starters run one at a
   time, alone on the GPU (their timing checks would see another process's kernels as work left
   running: a parallel run failed softmax so once); the attacks then run side by side.
3. Times each starter against the Triton starter, PyTorch eager (the reference) and a device copy
   of the same bytes, alone on the GPU: triton.testing.do_bench (median, L2 flushed between calls).
   "of copy" is the starter's bytes moved per second (the kernel type's bytes_moved) over the copy's.
4. Times the GEMM starter (kernels/cuda/matmul.py) and the Triton one against cuBLAS (torch.matmul) in
   float16, bfloat16 and float32 at GEMM_SHAPES, the same way; "of cuBLAS" is cuBLAS's time over ours.
   Float32 follows torch.get_float32_matmul_precision() (recorded per row): cuBLAS uses TF32 when it allows.
Needs: an NVIDIA GPU, nvcc of the CUDA major version torch was built with (CUDA_HOME, or on PATH) and ninja;
the builds go to $AUTOKERNEL_CUDA_CACHE (default ~/.cache/autokernel/cuda). Exit code 1 when anything is
not as expected.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from autokernel.kernel_types import registry
from benchmarks.common import ROOT, do_bench_us as median_us, load_module as load, run_info, write_json

STARTERS = ["rmsnorm", "softmax", "matmul"]
MEMORY_BOUND = ["rmsnorm", "softmax"]
ATTACKS = runpy.run_path(str(ROOT / "tests" / "attacks" / "expected.py"))["ATTACKS"]
CUDA_ATTACKS = [name for name in ATTACKS if name.startswith("cuda_")]
# Shapes timed per starter: the type's timing shape first (also in bfloat16 and float32), then others in float16.
TIMED_SHAPES = {"rmsnorm": [{"M": 8192, "N": 8192}, {"M": 4096, "N": 2048}, {"M": 1024, "N": 16384},
                            {"M": 16, "N": 64, "I": 65536}],
                "softmax": [{"M": 8192, "N": 8192}, {"M": 4096, "N": 2048}, {"M": 256, "N": 32768}]}
# GEMM shapes (M, N, K) timed against cuBLAS (torch.matmul) and the Triton starter, in every dtype:
# squares, an LLM projection (4096 tokens, 4096 -> 1024) and KernelBench's irregular one.
GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 1024, 4096), (8205, 2949, 5921)]
BUILD_TIMEOUT_S = 600
BENCH_TIMEOUT_S = 900


def nvcc_version(nvcc: Path) -> str | None:
    """The CUDA release nvcc reports ("13.0"), or None."""
    try:
        text = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


def preflight() -> dict:
    from torch.utils import cpp_extension

    problems = []
    if not torch.cuda.is_available():
        problems.append("torch sees no GPU")
    if not cpp_extension.is_ninja_available():
        problems.append("ninja is not installed (pip install ninja): load_inline builds with it")
    if cpp_extension.CUDA_HOME is None:
        problems.append("nvcc not found: set CUDA_HOME (e.g. /usr/local/cuda)")
    else:
        nvcc_cuda = nvcc_version(Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc")
        # load_inline refuses an nvcc whose major version differs from the CUDA torch was built with.
        if nvcc_cuda and torch.version.cuda and nvcc_cuda.split(".")[0] != torch.version.cuda.split(".")[0]:
            problems.append(f"nvcc is CUDA {nvcc_cuda} but torch was built with CUDA {torch.version.cuda}: "
                            "point CUDA_HOME at a toolkit of the same major version")
    if problems:
        sys.exit("cuda_check: " + "; ".join(problems))
    return {**run_info().as_dict(), "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "torch_cuda": torch.version.cuda, "cuda_home": cpp_extension.CUDA_HOME,
            "nvcc": nvcc_version(Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc")}


def cuda_files(with_attacks: bool) -> list[Path]:
    files = [ROOT / "kernels" / "cuda" / f"{name}.py" for name in STARTERS]
    return files + ([ROOT / "tests" / "attacks" / f"{name}.py" for name in CUDA_ATTACKS] if with_attacks else [])


def build_all(files: list[Path]) -> list[dict]:
    """Import each file in a process of its own (its load_cuda builds or finds the build), all at once."""
    started = {path: (time.monotonic(), subprocess.Popen(
        [sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1])", str(path)], cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)) for path in files}
    rows = []
    for path, (began, proc) in started.items():
        try:
            output, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            output = f"timed out after {BUILD_TIMEOUT_S} s"
        error = next((line for line in output.splitlines() if "Error" in line or "error" in line), output[-300:])
        rows.append({"file": str(path.relative_to(ROOT)), "built": proc.returncode == 0,
                     "seconds": round(time.monotonic() - began, 1), "error": None if proc.returncode == 0 else error})
        print(f"build  {rows[-1]['file']:<48} {'ok' if rows[-1]['built'] else 'FAILED'} {rows[-1]['seconds']:6.1f} s"
              + (f"  {error}" if rows[-1]["error"] else ""), flush=True)
    return rows


def judge_all(with_attacks: bool, folder: Path) -> list[dict]:
    """bench.py on every starter (full verdict, PASS expected) and CUDA attack (quick, rejection expected)."""
    jobs = [(f"kernels/cuda/{name}.py", ("PASS", (None,), ""), []) for name in STARTERS]
    if with_attacks:
        for name in CUDA_ATTACKS:
            correctness, stages, message, _ = ATTACKS[name]
            jobs.append((f"tests/attacks/{name}.py", (correctness, stages if isinstance(stages, tuple) else (stages,),
                                                      message), ["--quick"]))

    def start(kernel: str, extra: list[str]):
        out = folder / (kernel.replace("/", "_") + ".json")
        return out, subprocess.Popen([sys.executable, str(ROOT / "bench.py"), "--kernel", str(ROOT / kernel),
                                      "--seed", "1234", "--json-out", str(out), *extra], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    # Each starter's full verdict includes the timing checks (no work left running past the timer's
    # events), which another process's kernels on the same GPU would confound: the starters run one
    # at a time, alone. The attacks are rejected before any timing, so they then run side by side.
    rows = [_judged(kernel, expected, *start(kernel, extra)) for kernel, expected, extra in jobs if not extra]
    attacks = [(kernel, expected, *start(kernel, extra)) for kernel, expected, extra in jobs if extra]
    return rows + [_judged(*attack) for attack in attacks]


def _judged(kernel: str, expected: tuple, out: Path, proc: subprocess.Popen) -> dict:
    """One bench.py run's verdict against the expected one, printed as a line."""
    correctness, stages, message = expected
    try:
        _, stderr = proc.communicate(timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stderr = "cuda_check: bench.py timed out"
    result = json.loads(out.read_text()) if out.exists() else {"correctness": "NO RESULT", "failed_stage": None,
                                                               "message": stderr[-500:]}
    ok = (result["correctness"] == correctness and result.get("failed_stage") in stages
          and message in str(result.get("message")))
    row = {"kernel": kernel, "expected": f"{correctness} {'/'.join(map(str, stages))} {message!r}",
           "correctness": result["correctness"], "failed_stage": result.get("failed_stage"),
           "message": str(result.get("message"))[:400], "load_seconds": result.get("load_seconds"), "ok": ok}
    print(f"judge  {kernel:<48} {result['correctness']:<6} {str(result.get('failed_stage')):<10} "
          f"{'ok' if ok else 'NOT AS EXPECTED'}  {row['message'][:100]}", flush=True)
    return row


def time_gemm() -> list[dict]:
    """The CUDA GEMM starter and the Triton one against cuBLAS (torch.matmul), TFLOP/s and ratios."""
    rows = []
    cuda_fn = load(ROOT / "kernels" / "cuda" / "matmul.py", "cuda_matmul").kernel_fn
    triton_fn = load(ROOT / "kernels" / "matmul.py", "triton_matmul").kernel_fn
    for M, N, K in GEMM_SHAPES:
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            gen = torch.Generator("cuda").manual_seed(0)
            a = torch.randn((M, K), generator=gen, device="cuda").to(dtype)
            b = torch.randn((K, N), generator=gen, device="cuda").to(dtype)
            expected = (a.double() @ b.double()) if M * N * K <= 4096 ** 3 else (a.float() @ b.float()).double()
            error = ((cuda_fn(a, b).double() - expected).abs().max() / expected.abs().max()).item()
            times = {"cuda": median_us(lambda: cuda_fn(a, b)), "triton": median_us(lambda: triton_fn(a, b)),
                     "cublas": median_us(lambda: torch.matmul(a, b))}
            row = {"shape": f"M={M},N={N},K={K}", "dtype": str(dtype).split(".")[-1],
                   "fp32_precision": torch.get_float32_matmul_precision(),
                   **{f"{k}_us": round(v, 1) for k, v in times.items()},
                   **{f"{k}_tflops": round(2 * M * N * K / v / 1e6, 1) for k, v in times.items()},
                   "cuda_of_cublas": round(times["cublas"] / times["cuda"], 3),
                   "triton_of_cublas": round(times["cublas"] / times["triton"], 3), "max_rel_error": error}
            rows.append(row)
            print(f"gemm   {row['shape']:<24} {row['dtype']:<9} cuda {row['cuda_tflops']:6.1f} TFLOP/s  triton "
                  f"{row['triton_tflops']:6.1f}  cuBLAS {row['cublas_tflops']:6.1f}  cuda {row['cuda_of_cublas']:.2f} "
                  f"of cuBLAS (triton {row['triton_of_cublas']:.2f})  rel err {error:.1e}", flush=True)
    return rows


def time_all() -> list[dict]:
    rows = []
    for name in MEMORY_BOUND:
        kt = registry.get(name)
        cuda_fn = load(ROOT / "kernels" / "cuda" / f"{name}.py", f"cuda_{name}").kernel_fn
        triton_fn = load(ROOT / "kernels" / f"{name}.py", f"triton_{name}").kernel_fn
        for index, shape in enumerate(TIMED_SHAPES[name]):
            for dtype in (torch.float16, torch.bfloat16, torch.float32) if index == 0 else (torch.float16,):
                inputs = kt.make_inputs(shape, dtype, torch.Generator("cuda").manual_seed(0), "cuda")
                expected = kt.reference(**inputs)
                error = (cuda_fn(**inputs).float() - expected.float()).abs().max().item()
                x = inputs["x"]
                copy_to = torch.empty_like(x)
                times = {"cuda": median_us(lambda: cuda_fn(**inputs)),
                         "triton": median_us(lambda: triton_fn(**inputs)),
                         "eager": median_us(lambda: kt.pytorch(**inputs)),
                         "copy": median_us(lambda: copy_to.copy_(x))}
                moved = kt.bytes_moved(shape, x.element_size())
                copy_rate = 2 * x.nbytes / times["copy"]
                row = {"kernel_type": name, "shape": registry.format_shape(shape), "dtype": str(dtype).split(".")[-1],
                       **{f"{k}_us": round(v, 2) for k, v in times.items()}, "max_abs_error": error,
                       "cuda_of_copy": round(moved / times["cuda"] / copy_rate, 3),
                       "triton_of_copy": round(moved / times["triton"] / copy_rate, 3),
                       "cuda_vs_triton": round(times["triton"] / times["cuda"], 3),
                       "cuda_vs_eager": round(times["eager"] / times["cuda"], 3),
                       "cuda_GBps": round(moved / times["cuda"] / 1e3, 1)}
                rows.append(row)
                print(f"time   {name:<8} {row['shape']:<18} {row['dtype']:<9} cuda {row['cuda_us']:8.1f} us  "
                      f"triton {row['triton_us']:8.1f}  eager {row['eager_us']:8.1f}  copy {row['copy_us']:8.1f}  "
                      f"cuda {row['cuda_of_copy']:.2f} of copy (triton {row['triton_of_copy']:.2f})  "
                      f"{row['cuda_GBps']:.0f} GB/s  err {error:.2e}", flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--skip-attacks", action="store_true", help="only the starters")
    parser.add_argument("--skip-timing", action="store_true", help="no speed comparison")
    parser.add_argument("--skip-gemm-timing", action="store_true", help="no GEMM timing against cuBLAS")


def main(args: argparse.Namespace) -> int:
    began = time.monotonic()
    environment = preflight()
    print(f"cuda_check on {environment['device']} (sm {environment['capability']}), torch {environment['torch']} "
          f"(CUDA {environment['torch_cuda']}), Triton {environment['triton']}", flush=True)
    report = {"environment": environment, "builds": build_all(cuda_files(not args.skip_attacks))}
    with tempfile.TemporaryDirectory(prefix="cuda_check-") as folder:
        report["judge"] = judge_all(not args.skip_attacks, Path(folder))
    report["timings"] = [] if args.skip_timing else time_all()
    report["gemm_timings"] = [] if args.skip_timing or args.skip_gemm_timing else time_gemm()
    report["seconds"] = round(time.monotonic() - began, 1)
    report["ok"] = all(b["built"] or "attacks" in b["file"] for b in report["builds"]) and all(
        j["ok"] for j in report["judge"])
    write_json(args.out, report)
    print(f"{'all as expected' if report['ok'] else 'NOT ALL AS EXPECTED'} in {report['seconds']} s; "
          f"JSON in {args.out}", flush=True)
    return 0 if report["ok"] else 1

