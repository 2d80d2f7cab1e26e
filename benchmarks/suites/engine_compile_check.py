"""Compile every plan of the GEMM engine for an H100 (sm_90) on a machine without a GPU: registers, spills, shared memory.

The plan space the GPU sweep times (ENGINE_PLANS) should hold no plan that spills or cannot fit, and
every epilogue the fused starters use must compile for Hopper. This compiles the engine's kernel with
the local Triton for sm_90 (`triton.compile(..., target=GPUTarget("cuda", 90, 32))`, then the bundled
cuobjdump for the resources) for each plan, kind and epilogue; it runs on the CPU machine. The GPU's
Triton (3.6) may compile differently from the local one: this screens, the GPU sweep decides.

    python benchmarks/cuda_check.py engine-compile [--dtype float16] [--ws]
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT  # noqa: E402

TRITON_TYPES = {"float16": "fp16", "bfloat16": "bf16"}
# Each epilogue the starters use, as the engine's constexprs (the rest off).
# "plain kn": B as (K, N) rows (the matmul type's b), the others read a weight's (N, K) rows.
EPILOGUES = {"plain": {}, "plain kn": {"B_NK": False}, "dual": {"DUAL": True}, "gate": {"GATE": True},
             "residual + stat": {"RESIDUAL": True, "OUT_STAT": True}, "rotary 128": {"ROTARY": 128}}
OFF = dict(DUAL=False, ROW_SCALE=False, GATE=False, BIAS=False, ROTARY=0, RESIDUAL=False, OUT_STAT=False)


def compile_plan(engine, text: str, dtype: str, epilogue: dict, warp_specialize: bool, b_nk: bool = True) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    p = engine.parse_engine_plan(text)
    fn = engine._engine_kernel
    names = list(inspect.signature(fn.fn).parameters)
    t = TRITON_TYPES[dtype]
    consts = {**OFF, **epilogue, "BLOCK_M": p.block_m, "BLOCK_N": p.block_n, "BLOCK_K": p.block_k,
              "GROUP_M": p.group_m, "SPLIT": False, "A_TMA": True, "B_TMA": True, "B_NK": b_nk, "C_TMA": True,
              "PRECISION": "ieee", "UPCAST": False, "FLATTEN": not warp_specialize, "WARP_SPECIALIZE": warp_specialize}
    signature = {name: "i32" for name in names}
    b_block = f"{p.block_n},{p.block_k}" if b_nk else f"{p.block_k},{p.block_n}"     # W's (N, K) rows, or B's (K, N)
    signature.update({"a_src": f"tensordesc<{t}[{p.block_m},{p.block_k}]>",
                      "b_src": f"tensordesc<{t}[{b_block}]>", "b2_src": f"tensordesc<{t}[{b_block}]>",
                      "c_dst": f"tensordesc<{t}[{p.block_m},{p.block_n}]>"})
    for name in ("ws_ptr", "scale_ptr", "stat_ptr", "cos_ptr", "sin_ptr"):
        signature[name] = "*fp32"
    for name in ("bias_ptr", "res_ptr", "gate_ptr"):
        signature[name] = f"*{t}"
    signature.update({name: "constexpr" for name in consts})
    source = ASTSource(fn, signature, constexprs={(names.index(k),): v for k, v in consts.items()})
    # Stages as the engine fits them to an H100's 227 KB beside the output's staging tile.
    per_stage = (p.block_m + p.block_n * (2 if epilogue.get("DUAL") else 1)) * p.block_k * 2
    stages = max(1, min(p.stages, (232448 - p.block_m * p.block_n * 2) // per_stage))
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": p.warps, "num_stages": stages})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    regs = re.search(r"REG:(\d+)", usage)
    local = re.search(r"LOCAL:(\d+)", usage)
    return {"regs": int(regs.group(1)) if regs else None, "spill_bytes": int(local.group(1)) if local else None,
            "shared": kernel.metadata.shared, "stages": stages,
            "wgmma": kernel.asm["ttgir"].count("warp_group_dot ")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", default="float16", choices=list(TRITON_TYPES))
    parser.add_argument("--ws", action="store_true", help="with Triton's warp specialization")
    parser.add_argument("--epilogues", default=",".join(EPILOGUES), help="comma-separated, of: " + ", ".join(EPILOGUES))


def main(args: argparse.Namespace) -> int:
    from autokernel.core.kernel_file import import_file
    engine = import_file(ROOT / "kernels" / "_gemm_engine.py", "_compile_check_engine")
    print("| plan | epilogue | registers | spilled bytes | shared KB | stages | wgmma ops |\n|---|---|---|---|---|---|---|")
    bad = 0
    for name in args.epilogues.split(","):
        kind = "dual" if EPILOGUES[name].get("DUAL") else "plain"
        for text in engine.ENGINE_PLANS[kind]:
            if EPILOGUES[name].get("ROTARY") and engine.parse_engine_plan(text).block_n < EPILOGUES[name]["ROTARY"]:
                continue
            try:
                epilogue = {k: v for k, v in EPILOGUES[name].items() if k != "B_NK"}
                r = compile_plan(engine, text, args.dtype, epilogue, args.ws, EPILOGUES[name].get("B_NK", True))
                bad += bool(r["spill_bytes"])
                print(f"| {text} | {name} | {r['regs']} | {r['spill_bytes']} | {r['shared'] / 1024:.0f} | "
                      f"{r['stages']} | {r['wgmma']} |", flush=True)
            except Exception as exc:      # a compile failure is a row: the point is to find them
                bad += 1
                print(f"| {text} | {name} | compile failed: {type(exc).__name__}: {str(exc)[:150]} | | | | |", flush=True)
    return 1 if bad else 0

