"""A CUDA starter's device code through NVRTC and ptxas for sm_90a, without a GPU: registers, spills, shared memory.

    python benchmarks/cuda_check.py compile [--kernel kernel.py] [--set WG_STAGES=3 ...] [--all]

CUDA_SOURCE's device code (everything outside its `#ifndef __CUDACC_RTC__` host part) is compiled by
NVRTC to PTX for compute_90a, with the tunables as #defines and AUTOKERNEL_SM90A defined (as
cuda_build.sm90a_flags does for nvcc on an H100), every `__global__` function instantiated (a
template one for __half and __nv_bfloat16); then `ptxas -arch=sm_90a -v` assembles it and reports,
per kernel, registers, spilled bytes, shared memory and any warning (such as wgmma serialised).
--all checks every combination of the WG_* tunables in TUNABLE_CHOICES: each must either compile
without spills and warnings, or be refused by one of CUDA_SOURCE's static_asserts (its message shown).
Exit code 1 when a compile fails otherwise, a kernel spills, or ptxas warns.

The softmax starter's kernels are templated on their group of threads and pieces per thread too:
its instances are every kernel softmax_rows can launch with the tunables (softmax_instances), each
with its blocks per SM by registers. Its --all walks PACKED_ROW, LOCAL_MAX and ROWS_PER_BLOCK at the
largest MAX_PACKS, with the block kernels of every BLOCK_THREADS choice: that covers every kernel any
combination of its TUNABLE_CHOICES can launch (BLOCK_THREADS and WARP_ROW_MAX_N only choose among
them, and with a smaller MAX_PACKS the pieces a kernel takes, min(pieces, fitting_packs), are ones the
largest builds too).

The tools: NVRTC (libnvrtc.so) and ptxas from the folder $AUTOKERNEL_CUDA_TOOLS (a CUDA toolkit, or
unpacked nvidia-cuda-nvrtc / -nvcc / -runtime wheels), else the `nvidia` wheels installed beside torch,
Triton's bundled ptxas and headers, or CUDA_HOME (/usr/local/cuda). None of them is a dependency.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from autokernel.judge import cuda_build, cuda_launches
from benchmarks.common import ROOT

TOOLS_ENV = "AUTOKERNEL_CUDA_TOOLS"
TEMPLATE_TYPES = ("__half", "__nv_bfloat16")   # the types a `template <typename T>` kernel is checked with
ARCH = "sm_90a"
HOPPER_TUNABLE_PREFIX = "WG_"                   # the tunables --all walks
SOFTMAX_KERNELS = {"softmax_regs_kernel", "softmax_loop_kernel"}
SOFTMAX_TYPES = ("__half", "__nv_bfloat16", "float")    # the dtypes AutoKernel verifies
SOFTMAX_WALKED = ("PACKED_ROW", "LOCAL_MAX", "ROWS_PER_BLOCK")
# Hopper's SM: 65536 registers (given out per warp in steps of 256: 8 per thread), at most 2048 threads, 32 blocks.
SM_REGISTERS, SM_THREADS, SM_BLOCKS = 65536, 2048, 32


@dataclass
class Tools:
    nvrtc: Path                  # libnvrtc.so
    ptxas: Path
    include: Path                # holds cuda_fp16.h and cuda_bf16.h


@dataclass
class KernelReport:
    name: str                    # as instantiated: gemm_wgmma_kernel<__half>
    registers: int = 0
    spill_stores: int = 0        # bytes
    spill_loads: int = 0
    stack: int = 0
    shared: int = 0              # static shared memory, bytes (dynamic shared memory is set at launch)
    warnings: list[str] = field(default_factory=list)
    threads: int = 0             # per block, where the instance says (0: not known)

    @property
    def clean(self) -> bool:
        return not (self.spill_stores or self.spill_loads or self.warnings)

    def line(self) -> str:
        occupancy = (f"  {self.threads:4d} threads, {blocks_per_sm(self.registers, self.threads)} per SM"
                     if self.threads else "")
        return (f"{self.name:<40} {self.registers:4d} registers  {self.spill_stores:4d} B spill stores  "
                f"{self.spill_loads:4d} B spill loads  {self.stack:4d} B stack  {self.shared:6d} B static smem"
                + occupancy + "".join(f"\n    ptxas: {w}" for w in self.warnings))


def blocks_per_sm(registers: int, threads: int) -> int:
    """Blocks of `threads` threads that fit an SM by registers and threads (shared memory aside)."""
    allocated = -(-max(registers, 1) // 8) * 8
    return min(SM_REGISTERS // (allocated * threads), SM_THREADS // threads, SM_BLOCKS)


class CompileError(RuntimeError):
    """NVRTC or ptxas refused the source; the message is its log."""


# --------------------------------------------------------------------------- finding the tools
def _candidate_roots() -> list[Path]:
    roots = [Path(os.environ[TOOLS_ENV])] if os.environ.get(TOOLS_ENV) else []
    spec = importlib.util.find_spec("nvidia")
    roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    spec = importlib.util.find_spec("triton")
    roots += [Path(spec.origin).parent / "backends" / "nvidia"] if spec and spec.origin else []
    roots += [Path(p) for p in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if p]
    return [root for root in roots if root.is_dir()]


def _version(text: str) -> tuple[int, int]:
    found = re.search(r"release (\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def nvrtc_version(library: Path) -> tuple[int, int]:
    lib = ctypes.CDLL(str(library))
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def find_tools() -> tuple[Tools | None, str]:
    """(the tools, "") or (None, why not): NVRTC, then a ptxas at least as new (NVRTC's PTX version must be
    one it reads), and headers from NVRTC's own release where they are there."""
    nvrtcs, ptxases, includes = [], [], []
    for root in _candidate_roots():
        nvrtcs += sorted(p for p in root.glob("**/libnvrtc.so*") if "builtins" not in p.name and "alt" not in p.name)
        ptxases += [p for p in root.glob("**/bin/ptxas") if os.access(p, os.X_OK)]
        includes += [p.parent for p in root.glob("**/include/cuda_fp16.h") if (p.parent / "cuda_bf16.h").exists()]
    if not nvrtcs:
        return None, f"no NVRTC (libnvrtc.so) found: set {TOOLS_ENV} to a CUDA toolkit or unpacked nvidia wheels"
    if not ptxases or not includes:
        return None, f"no ptxas or no CUDA headers (cuda_fp16.h) found: set {TOOLS_ENV}"
    loadable = []
    for library in nvrtcs:
        try:
            loadable.append((library, nvrtc_version(library)))
        except OSError:          # a library for another platform, or missing its dependencies
            continue
    if not loadable:
        return None, f"no NVRTC that loads here among {', '.join(map(str, nvrtcs))}"
    nvrtc, wanted = loadable[0]
    for ptxas in ptxases:
        text = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True, timeout=60).stdout
        if _version(text) >= wanted:
            same_release = [p for p in includes if p.is_relative_to(nvrtc.parents[2])]
            return Tools(nvrtc, ptxas, (same_release or includes)[0]), ""
    return None, f"no ptxas of CUDA {wanted[0]}.{wanted[1]} or later (NVRTC's release) found"


# --------------------------------------------------------------------------- compiling
def device_source(cuda_source: str) -> str:
    """CUDA_SOURCE as NVRTC sees it: its host part sits under `#ifndef __CUDACC_RTC__`, which NVRTC defines."""
    if "#ifndef __CUDACC_RTC__" not in cuda_source:
        raise ValueError("CUDA_SOURCE keeps no host part under `#ifndef __CUDACC_RTC__`: NVRTC cannot compile "
                         "its torch wrapper")
    return cuda_source


def kernel_instances(cuda_source: str) -> list[str]:
    """Every __global__ function as a name NVRTC can instantiate: templates once per TEMPLATE_TYPES."""
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", re.sub(r"//[^\n]*", " ", cuda_source))
    templated = set(re.findall(r"template\s*<typename T>\s*__global__\b[^;{}()]*?\b(\w+)\s*\(", text))
    names = sorted(cuda_launches.global_function_names(cuda_source))
    return [f"{name}<{t}>" for name in names if name in templated for t in TEMPLATE_TYPES] + \
        [name for name in names if name not in templated]


def softmax_instances(tunables: dict, block_groups: list[int]) -> list[tuple[str, int]]:
    """(NVRTC name expression, threads per block) of every kernel the softmax starter's softmax_rows launches in
    SOFTMAX_TYPES: the looping kernel and the register kernel at each power of two of pieces up to fitting_packs
    (CUDA_SOURCE's constexpr, evaluated by NVRTC in the name), for a warp per row and for blocks of each of
    `block_groups` threads per row (none: the warp's kernels alone)."""
    instances = []
    for t in SOFTMAX_TYPES:
        for group in [32, *block_groups]:
            threads = 32 * int(tunables["ROWS_PER_BLOCK"]) if group == 32 else group
            fit = f"fitting_packs<{t}, {group}>()"
            for packs in (1 << i for i in range(int(tunables["MAX_PACKS"]).bit_length())):
                instances.append((f"softmax_regs_kernel<{t}, {group}, ({packs} < {fit} ? {packs} : {fit})>", threads))
            instances.append((f"softmax_loop_kernel<{t}, {group}>", threads))
    return instances


def instances_of(cuda_source: str, tunables: dict) -> list[tuple[str, int]]:
    """(name expression, threads per block or 0) of the kernels to build with these tunables."""
    if SOFTMAX_KERNELS <= cuda_launches.global_function_names(cuda_source):
        return softmax_instances(tunables, [int(tunables["BLOCK_THREADS"])])
    return [(name, 0) for name in kernel_instances(cuda_source)]


def instance_label(expression: str, lowered: str) -> str:
    """The instance's name, with the template arguments the expression computed read back as numbers."""
    if "(" not in expression:
        return expression
    name, arguments = expression.split("<", 1)
    numbers = re.findall(r"Li(\d+)E", lowered)          # int template arguments in the Itanium mangling
    return f"{name}<{', '.join([arguments.split(',', 1)[0], *numbers])}>"


def _nvrtc_call(lib, status: int, what: str, program) -> None:
    if status != 0:
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        raise CompileError(f"NVRTC {what} failed (status {status}):\n{log.value.decode(errors='replace')}")


def nvrtc_ptx(tools: Tools, source: str, instances: list[str], defines: list[str]) -> tuple[str, dict[str, str]]:
    """(PTX for compute_90a, {mangled name: the name expression})."""
    lib = ctypes.CDLL(str(tools.nvrtc))
    program = ctypes.c_void_p()
    _nvrtc_call(lib, lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"CUDA_SOURCE.cu", 0, None, None),
                "create", program)
    try:
        for name in instances:
            _nvrtc_call(lib, lib.nvrtcAddNameExpression(program, name.encode()), f"naming {name}", program)
        options = [f"--gpu-architecture=compute_{ARCH[3:]}", "-std=c++17", f"-I{tools.include}",
                   *(f"-D{d}" for d in defines)]
        array = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        _nvrtc_call(lib, lib.nvrtcCompileProgram(program, len(options), array), "compile", program)
        size = ctypes.c_size_t()
        lib.nvrtcGetPTXSize(program, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(program, ptx)
        mangled = {}
        for name in instances:
            lowered = ctypes.c_char_p()
            _nvrtc_call(lib, lib.nvrtcGetLoweredName(program, name.encode(), ctypes.byref(lowered)), "lowering",
                        program)
            mangled[lowered.value.decode()] = name
        return ptx.value.decode(), mangled
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def parse_ptxas(log: str, names: dict[str, str]) -> list[KernelReport]:
    """ptxas -v's report, one KernelReport per entry function; lines that warn go to the entry they follow."""
    reports: dict[str, KernelReport] = {}
    current = None
    for line in log.splitlines():
        entry = re.search(r"(?:Compiling entry function|Function properties for) '?([\w.$]+)'?", line)
        if entry:
            current = reports.setdefault(entry[1], KernelReport(names.get(entry[1], entry[1])))
            continue
        if current is None:
            continue
        if found := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            current.stack, current.spill_stores, current.spill_loads = map(int, found.groups())
        elif found := re.search(r"Used (\d+) registers", line):
            current.registers = int(found[1])
            current.shared = int(m[1]) if (m := re.search(r"(\d+) bytes smem", line)) else 0
        elif re.search(r"warning|Performance Loss", line, re.I):
            current.warnings.append(line.split("ptxas", 1)[-1].strip(" :"))
    return list(reports.values())


def check(cuda_source: str, tunables: dict, tools: Tools,
          instances: list[str] | list[tuple[str, int]] | None = None) -> list[KernelReport]:
    """The device code built with these tunables, per kernel; CompileError when NVRTC or ptxas refuses it.
    `instances`: name expressions, or (expression, threads per block) pairs; by default instances_of's."""
    pairs = [(i, 0) if isinstance(i, str) else i for i in (instances or instances_of(cuda_source, tunables))]
    source = cuda_build.full_source(device_source(cuda_source), tunables)
    defines = [flag[2:] for flag in cuda_build.SM90A_FLAGS if flag.startswith("-D")]
    ptx, expressions = nvrtc_ptx(tools, source, list(dict.fromkeys(name for name, _ in pairs)), defines)
    names = {mangled: instance_label(expression, mangled) for mangled, expression in expressions.items()}
    threads_of = dict(pairs)
    threads = {names[mangled]: threads_of[expression] for mangled, expression in expressions.items()}
    with tempfile.TemporaryDirectory(prefix="cuda_compile_check-") as folder:
        (Path(folder) / "k.ptx").write_text(ptx)
        proc = subprocess.run([str(tools.ptxas), f"-arch={ARCH}", "-v", "-O3", str(Path(folder) / "k.ptx"), "-o",
                               str(Path(folder) / "k.cubin")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise CompileError(f"ptxas failed:\n{proc.stderr[-4000:]}")
    reports = parse_ptxas(proc.stdout + proc.stderr, names)
    for report in reports:
        report.threads = threads.get(report.name, 0)
    return reports


def static_assert_message(error: CompileError) -> str | None:
    """The message of the static_assert that refused a build, or None when something else failed."""
    found = re.search(r'static assertion failed with "([^"]*)"', str(error))
    return found[1] if found else None


@dataclass
class Walk:
    """What --all builds: every combination of `names`' TUNABLE_CHOICES over the tunables, with `fixed` set, and
    for each, the instances `instances(combination)`."""
    names: list[str]
    fixed: dict
    instances: Callable[[dict], list]


def walk_of(cuda_source: str, choices: dict) -> Walk:
    """The softmax starter's walk (the module docstring says why it covers every combination), else the WG_*
    tunables with the Hopper kernels."""
    if SOFTMAX_KERNELS <= cuda_launches.global_function_names(cuda_source):
        # The block-per-row kernels do not depend on ROWS_PER_BLOCK: built with its first choice only.
        def instances(combination: dict) -> list[tuple[str, int]]:
            first = combination["ROWS_PER_BLOCK"] == choices["ROWS_PER_BLOCK"][0]
            return softmax_instances(combination, list(choices["BLOCK_THREADS"]) if first else [])
        return Walk(list(SOFTMAX_WALKED), {"MAX_PACKS": max(choices["MAX_PACKS"])}, instances)
    hopper = [name for name in kernel_instances(cuda_source) if "wgmma" in name]
    return Walk([name for name in choices if name.startswith(HOPPER_TUNABLE_PREFIX)], {}, lambda _: hopper)


def combinations(tunables: dict, choices: dict, names: list[str], fixed: dict | None = None) -> list[dict]:
    """The tunables (`fixed` set) with every combination of `names`' choices in place of their values."""
    base = {**tunables, **(fixed or {})}
    return [{**base, **dict(zip(names, values))} for values in itertools.product(*(choices[n] for n in names))]


def _build(job: tuple) -> list[KernelReport] | CompileError:
    cuda_source, combination, tools, instances = job
    try:
        return check(cuda_source, combination, tools, instances)
    except CompileError as error:
        return error


def walk_reports(cuda_source: str, tunables: dict, choices: dict,
                 tools: Tools) -> list[tuple[dict, list[KernelReport] | CompileError]]:
    """(combination, its reports or the CompileError that refused it) for each combination --all builds, one
    process per CPU building them."""
    walk = walk_of(cuda_source, choices)
    todo = combinations(tunables, choices, walk.names, walk.fixed)
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(zip(todo, pool.map(_build, [(cuda_source, c, tools, walk.instances(c)) for c in todo])))


def _parse_sets(items: list[str]) -> dict:
    values = {}
    for item in items:
        name, _, value = item.partition("=")
        values[name] = int(value)
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", type=Path, default=ROOT / "kernels" / "cuda" / "matmul.py",
                        help="the CUDA kernel file (default: the GEMM starter)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a tunable's value")
    parser.add_argument("--all", action="store_true",
                        help="every combination of the WG_* choices (the softmax starter: see the docstring)")


def main(args: argparse.Namespace) -> int:
    tools, why = find_tools()
    if tools is None:
        sys.exit(f"cuda_compile_check: {why}")
    literals = cuda_launches.file_literals(args.kernel.read_text())
    source, tunables = literals["CUDA_SOURCE"], {**literals["TUNABLES"], **_parse_sets(args.set)}
    print(f"NVRTC {tools.nvrtc}\nptxas {tools.ptxas}\nheaders {tools.include}\n")
    ok = True
    for report in check(source, tunables, tools):
        print(report.line())
        ok &= report.clean
    if args.all:
        walk = walk_of(source, literals["TUNABLE_CHOICES"])
        print(f"\nevery combination of {', '.join(walk.names)}" + "".join(f", {k}={v}" for k, v in walk.fixed.items()))
        for combination, reports in walk_reports(source, tunables, literals["TUNABLE_CHOICES"], tools):
            label = " ".join(f"{name}={combination[name]}" for name in walk.names)
            if isinstance(reports, CompileError):
                refused = static_assert_message(reports)
                ok &= refused is not None
                print(f"{label:<58} refused: {refused}" if refused else f"{label}: FAILED\n{reports}")
                continue
            worst = max(reports, key=lambda r: r.registers)
            dirty = [r for r in reports if not r.clean]
            print(f"{label:<58} {len(reports)} kernels, at most {worst.registers} registers ({worst.name})"
                  + ("" if not dirty else "  NOT CLEAN: " + "; ".join(
                      f"{r.name} spills {r.spill_stores} B" + "".join(f", {w}" for w in r.warnings) for r in dirty)))
            ok &= not dirty
    print("\nall clean" if ok else "\nNOT ALL CLEAN")
    return 0 if ok else 1

