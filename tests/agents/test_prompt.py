"""Tests for autokernel/agents/prompt.py and feedback.py: what the request carries, in which part.

Replies are read in tests/agents/test_reply.py; the playbook's selection in tests/agents/test_playbook.py.
"""

from dataclasses import replace

import pytest
import torch

from autokernel.agents.base import AgentContext
from autokernel.agents.feedback import HISTORY_WINDOW, describe_result
from autokernel.agents.prompt import build_messages
from autokernel.core import hardware
from autokernel.core.contracts import BenchResult, JudgedResult
from autokernel.core.paths import PROGRAM_MD
from autokernel.judge import limits
from autokernel.kernel_types import registry
from autokernel.search import policy

# A kernel file long enough that a small change is shorter as a diff than whole, as real kernels are.
HELPERS = "".join(f"\n\ndef _helper_{n}(x):\n    return x  # a line of a real kernel\n" for n in range(8))
KERNEL = 'KERNEL_TYPE = "softmax"\nTUNABLES = {"BLOCK": 64}\n' + HELPERS + '\n\ndef kernel_fn(x):\n    return x\n'
OLDER_KERNEL = KERNEL.replace('"BLOCK": 64', '"BLOCK": 32')
KERNEL_FN_LINE = KERNEL.splitlines().index("def kernel_fn(x):") + 1
PASS = BenchResult("PASS", throughput=1234.5678, throughput_unit="GB/s", latency_us=81.0, pct_peak=37.5, bound="memory",
                   speedup_vs_pytorch=1.42, speedup_vs_compile=0.97, timing_shapes=["M=8192,N=8192"], dtype="float16",
                   timings_meaningful=True)
FAIL = BenchResult("FAIL", failed_stage="edge shapes", message="M=3,N=1023 float16: max abs error 0.5 at (2, 1022)")
H100 = hardware.Platform(hardware.lookup("NVIDIA H100 80GB HBM3"), triton="3.6.0", cuda="13.0", torch="2.11.0")
CPU = hardware.Platform(hardware.CPU_INTERPRETER, triton="3.9.0", cuda=None, torch="2.13.0")


def _best(latency_us: float) -> JudgedResult:
    """The best an experiment was judged against."""
    return JudgedResult(BenchResult("PASS", latency_us=latency_us))


def context(**changes) -> AgentContext:
    fields = dict(kernel_type="softmax", kernel_source=KERNEL, last_result=FAIL,
                  history=[policy.history_entry(1, "BLOCK 32 -> 64", "keep", JudgedResult(PASS), against=_best(90.0),
                                                noise=0.02, hypothesis="more rows per program"),
                           policy.history_entry(2, "drop the column mask", "revert", JudgedResult(FAIL),
                                                against=_best(81.0), noise=0.02)],
                  best_versions=[(KERNEL, PASS), (OLDER_KERNEL, PASS)], program="PLAYBOOK TEXT",
                  job={"rank": 2, "kernel_type": "softmax", "shapes": [{"M": 4096, "N": 50257}], "dtype": "bfloat16"},
                  baseline=PASS, platform=CPU)
    fields.update(changes)
    return AgentContext(**fields)


def test_prompt_parts_carry_program_job_kernel_error_history_and_best_versions():
    messages = build_messages(context())
    assert messages.system == "PLAYBOOK TEXT\n"
    assert "M=4096,N=50257" in messages.job and "bfloat16" in messages.job
    assert "def softmax(x: torch.Tensor)" in messages.job, "the reference defines the math"
    assert "The starter kernel scored: correctness=PASS" in messages.job
    turn = messages.turn
    assert KERNEL.rstrip() in turn
    assert "correctness=FAIL at edge shapes" in turn and "max abs error 0.5 at (2, 1022)" in turn
    assert "| 1 | keep | 81 | 0.9 | 88.24 | keep | BLOCK 32 -> 64 | more rows per program |" in turn
    assert "| 2 | revert | - | - | 79.41 | FAIL at edge shapes: M=3,N=1023 float16: max abs error 0.5 at (2, 1022) |" \
           in turn
    assert "(This is the current kernel.py below.)" in turn and "+TUNABLES = {\"BLOCK\": 32}" in turn, \
        "another best version is shown as a diff against the current kernel"
    assert turn.rstrip().endswith("```"), "the reply format comes last"
    assert messages.user == f"{messages.job}\n\n{turn}"


def test_the_job_part_is_the_same_on_every_call_of_a_job():
    first = build_messages(context(last_result=None, history=[], best_versions=[]))
    later = build_messages(context(last_result=PASS, history=context().history))
    assert (first.system, first.job) == (later.system, later.job) and first.turn != later.turn


def test_first_experiment_says_so_and_skips_empty_sections():
    turn = build_messages(context(last_result=None, history=[], best_versions=[])).turn
    assert "first experiment" in turn
    assert "Recent experiments" not in turn and "Best versions" not in turn


def test_pass_result_reports_speed_headroom_and_bound():
    text = describe_result(PASS)
    for fragment in ("throughput 1235 GB/s", "37.5% of peak", "memory-bound", "1.42x vs PyTorch", "M=8192,N=8192"):
        assert fragment in text
    assert "say nothing about GPU speed" in describe_result(replace(PASS, timings_meaningful=False))


def test_long_error_keeps_both_ends():
    message = "stage summary " + "x" * 10000 + " root cause"
    text = describe_result(replace(FAIL, message=message))
    assert "stage summary" in text and "root cause" in text and "characters cut" in text
    assert len(text) < 4000


# --------------------------------------------------------------------------- the machine and the launch
def _launched(grid: list[int]) -> BenchResult:
    return replace(PASS, compiled=[{"kernel": "_softmax_rows", "registers": 32, "spills": 0, "shared_bytes": 0,
                                    "num_warps": 4, "num_stages": 1, "grid": grid}])


def test_the_gpu_prompt_names_the_machine_and_each_kernels_grid_and_programs_per_sm():
    messages = build_messages(context(platform=H100, last_result=_launched([8, 1, 1])))
    for fact in ("NVIDIA H100 SXM, compute capability 9.0: 132 SMs, 50 MB L2.",
                 "Per SM: 228 KB shared memory, 65536 32-bit registers, at most 64 warps and 32 blocks resident.",
                 "Software: Triton 3.6.0, CUDA 13.0, torch 2.11.0."):
        assert fact in messages.job
    assert ("launched _softmax_rows: grid (8, 1, 1) = 8 programs on 132 SMs, 0.0606 per SM (124 SMs idle); "
            "16 fit on an SM at once, so 1 wave (0.0038)") in messages.turn
    cpu = build_messages(context(last_result=_launched([8, 1, 1])))
    assert "GPU: none (CPU (Triton interpreter))" in cpu.job and "Triton 3.9.0, CUDA none" in cpu.job
    assert "launched _softmax_rows: grid (8, 1, 1) = 8 programs" in cpu.turn


def _baseline_on_h100(shape: dict, latency_us: float, floor_us: float | None) -> BenchResult:
    summary = limits.summarize(registry.get("softmax"), torch.float16, H100.gpu, [(shape, latency_us)], [],
                               tf32=False, floor_us=floor_us)
    return replace(PASS, limits=summary.to_json(), launch_floor_us=floor_us,
                   timings=[{"shape": registry.format_shape(shape), "latency_us": latency_us}])


def test_a_latency_bound_job_gets_its_headroom_against_the_launch_floor_and_its_regimes_advice():
    shape = {"M": 64, "N": 512}                          # 128 KB in fp16 moves in 0.04 us at 3.35 TB/s
    baseline = _baseline_on_h100(shape, latency_us=6.0, floor_us=4.0)
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [shape], "dtype": "float16"}
    messages = build_messages(context(job=job, baseline=baseline, last_result=baseline, platform=H100,
                                      program=PROGRAM_MD.read_text()))
    assert "latency-bound: its roofline time, 0.0391 us, is below the launch floor (4 us measured" in messages.turn
    assert "so at most 1.5x left above that floor" in messages.turn
    assert "Regime: latency-bound" in messages.job
    assert "### Latency-bound shapes" in messages.system and "### Memory-bound shapes" not in messages.system
    big = {"M": 8192, "N": 8192}
    bandwidth_bound = _baseline_on_h100(big, latency_us=100.0, floor_us=4.0)
    system = build_messages(context(job={**job, "shapes": [big]}, baseline=bandwidth_bound, platform=H100,
                                    program=PROGRAM_MD.read_text())).system
    assert "### Memory-bound shapes" in system and "### Latency-bound shapes" not in system


# --------------------------------------------------------------------------- memory: history and failures
def test_history_rows_older_than_the_window_are_summarised_not_dropped():
    history = [policy.history_entry(n, f"idea number {n}", "revert", JudgedResult(replace(PASS, latency_us=90.0)),
                                    against=_best(81.0), noise=0.02) for n in range(1, 31)]
    older = [{"experiment": 0, "status": "keep", "reason": "", "description": "the very first idea"}]
    turn = build_messages(context(history=history, older=older)).turn
    assert "## Earlier experiments (19, summarised: do not try these ideas again)" in turn
    assert "- exp 0 keep: the very first idea" in turn
    assert "- exp 1 revert, slower than the best (90 us against 81 us): idea number 1" in turn
    table = turn[turn.index("## Recent experiments"):]
    assert table.count("| revert |") == HISTORY_WINDOW and "| 30 | revert | 90 | 1.111 | 79.41 |" in table
    assert "idea number 18 |" not in table


def test_a_failed_candidate_is_shown_as_a_diff_with_its_whole_error_mapped_to_its_line():
    failed = KERNEL.replace("    return x\n", "    y = x +\n    return y\n")
    line = KERNEL_FN_LINE + 1
    message = f"SyntaxError: invalid syntax (at kernel.py:{line}: y = x +) -- " + "detail " * 400 + "the end"
    failure = {"experiment": 7, "description": "fuse the add", "hypothesis": "one launch less",
               "source": failed, "correctness": "CRASH", "failed_stage": "load", "message": message, "fix_turn": 0}
    turn = build_messages(context(failure=failure, last_result=BenchResult("CRASH", failed_stage="load",
                                                                           message=message))).turn
    section = turn[turn.index("## The last candidate failed: exp 7 (fuse the add), CRASH at load"):]
    assert "Its hypothesis: one launch less" in section
    assert message in section, "the whole error, not a cut one"
    assert f">{line:4d} |     y = x +" in section and f" {line - 1:4d} | def kernel_fn(x):" in section
    assert "```diff\n--- a/kernel.py (kept)\n+++ b/kernel.py (exp 7)" in section and "+    y = x +" in section
    assert "begin your reply with `FIX OF: exp 7`" in section and "fix 1 of 2" in section
    spent = build_messages(context(failure={**failure, "fix_turn": 2})).turn
    assert "has had its 2 fixes: drop it" in spent and "Or fix the failed candidate" not in spent


def test_a_cuda_compile_error_is_mapped_into_cuda_source():
    source = 'KERNEL_TYPE = "softmax"\nBACKEND = "cuda"\nCUDA_SOURCE = r"""\n__global__ void k() {\n  oops;\n}\n"""\n'
    failure = {"experiment": 3, "description": "cuda", "source": source, "correctness": "CRASH",
               "failed_stage": "load", "message": "CUDA compile error at CUDA_SOURCE line 2: identifier oops",
               "fix_turn": 1}
    turn = build_messages(context(failure=failure)).turn
    assert ">   5 |   oops;" in turn and "fix 2 of 2" in turn


@pytest.mark.parametrize("backend, expected", [(None, "Backend: Triton"), ("triton", "Backend: Triton"),
                                               ("cuda", 'BACKEND = "cuda"'), ("any", "Backend: any")])
def test_the_job_names_its_backend(backend, expected):
    job = {**context().job, **({"backend": backend} if backend else {})}     # jobs saved before --backend: Triton
    assert expected in build_messages(context(job=job)).job


def test_with_several_gpus_the_prompt_names_the_candidates_being_judged_and_asks_for_several():
    turn = build_messages(context(in_flight=["BLOCK 64 -> 128", "num_warps 4 -> 8"], max_candidates=4)).turn
    assert "Being judged right now on other GPUs" in turn
    assert "- BLOCK 64 -> 128\n- num_warps 4 -> 8" in turn and "Propose a different idea" in turn
    assert "You may give up to 4 candidates" in turn
    alone = build_messages(context(in_flight=None)).turn
    assert "Being judged right now" not in alone and "Give ONE candidate." in alone
