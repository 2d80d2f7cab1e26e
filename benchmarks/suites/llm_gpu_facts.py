"""What the LLM agent is told on a real GPU: the judge's launch grids and launch floor, and the prompt it renders.

    python benchmarks/loop.py llm-facts --out DIR [--kernel softmax] [--shape M=64,N=512 --shape M=8192,N=8192]

Runs the real judge (bench.py --quick, float16) on the starter at each shape, one shape per run, and prints:
the compiled figures and launch grid of each kernel, the launch floor (`launch_floor_us`: the GPU time of the
smallest launch, which the headroom of a latency-bound shape is measured against), the judge's "what limits the
kernel" lines, and then the agent's request built from those results with this machine's facts (SM count, L2,
per-SM limits, Triton and CUDA versions): the sizes of its three parts, the job part, and the turn's launch and
limits lines. Expectations written before the run (an H100, Triton 3.6): the floor is 2-6 us; at 64 x 512 the
softmax starter launches a handful of programs on 132 SMs and the shape is latency-bound (headroom under 3x
against the floor, where the roofline alone would say ~100x); at 8192 x 8192 it is memory-bound with headroom
under 1.5x. Without a GPU the same runs go through Triton's interpreter: grids, no figures, no floor.
Writes DIR/facts.json and DIR/prompt_<shape>.md. No LLM package is needed (the SDKs are imported only by agents).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from autokernel.agents.base import AgentContext
from autokernel.agents.feedback import describe_result
from autokernel.agents.prompt import build_messages
from autokernel.core import hardware
from autokernel.core.paths import PROGRAM_MD, starter_path
from autokernel.judge import limits
from autokernel.kernel_types import registry
from benchmarks.common import run_info, run_judge, write_json


def judge(kernel: Path, shape: str) -> dict:
    result, _, proc = run_judge(kernel, "--shape", shape, "--dtype", "float16", "--quick", "--seed", "1", timeout=300)
    if result is None:
        raise SystemExit(f"bench.py wrote no result for {shape}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", default="softmax")
    parser.add_argument("--shape", action="append", help="a timed shape (repeatable); default 64x512 and 8192^2")
    parser.add_argument("--out", required=True)


def main(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = args.shape or (["M=64,N=512", "M=8192,N=8192"] if args.kernel == "softmax"
                            else [registry.format_shape(registry.get(args.kernel).timing_shape)])
    platform = hardware.platform()
    print(f"{platform.gpu.name}: {platform.gpu.sm_count} SMs, L2 {platform.gpu.l2_bytes}, capability "
          f"{platform.gpu.capability}; Triton {platform.triton}, CUDA {platform.cuda}, torch {platform.torch}")
    facts = {"date": run_info().date, "platform": {"gpu": platform.gpu.name, "sm_count": platform.gpu.sm_count, "l2_bytes": platform.gpu.l2_bytes,
                          "triton": platform.triton, "cuda": platform.cuda, "torch": platform.torch}, "shapes": {}}
    kernel = starter_path(args.kernel)
    for shape in shapes:
        result = judge(kernel, shape)
        print(f"\n=== {args.kernel} {shape}: {result['correctness']} {result.get('message') or ''}")
        print(describe_result(result, platform.gpu))
        print("\n".join(limits.describe(result.get("limits"))))
        job = {"rank": 1, "kernel_type": args.kernel, "model": "llm_gpu_facts", "dtype": "float16",
               "shapes": [registry.parse_shape(shape)], "baseline": result}
        source = kernel.read_text()
        messages = build_messages(AgentContext(
            kernel_type=args.kernel, kernel_source=source, last_result=result, history=[],
            best_versions=[(source, result)], program=PROGRAM_MD.read_text(), job=job, platform=platform))
        print(f"request: system {len(messages.system)} chars, job {len(messages.job)}, turn {len(messages.turn)}")
        print(messages.job)
        (out / f"prompt_{shape.replace('=', '').replace(',', '_')}.md").write_text(
            f"# system\n\n{messages.system}\n\n# user\n\n{messages.user}\n")
        facts["shapes"][shape] = {key: result.get(key) for key in (
            "correctness", "latency_us", "launch_floor_us", "compiled", "limits", "pct_peak", "bound")}
        facts["shapes"][shape]["request_chars"] = {"system": len(messages.system), "job": len(messages.job),
                                                   "turn": len(messages.turn)}
    write_json(out / "facts.json", facts)
    print(f"\nwritten: {out / 'facts.json'} and the prompts")
    return 0

