"""Tests for autokernel/agents/prompt.py: what the prompt carries and how strictly replies are parsed."""

import pytest

from autokernel.agents.base import AgentContext
from autokernel.agents.prompt import build_messages, describe_result, format_reply, parse_reply

KERNEL = 'KERNEL_TYPE = "softmax"\nTUNABLES = {"BLOCK": 64}\n\ndef kernel_fn(x):\n    return x\n'
OLDER_KERNEL = 'KERNEL_TYPE = "softmax"\nTUNABLES = {"BLOCK": 32}\n'
PASS = {"correctness": "PASS", "throughput": 1234.5678, "throughput_unit": "GB/s", "latency_us": 81.0,
        "pct_peak": 37.5, "bound": "memory", "speedup_vs_pytorch": 1.42, "speedup_vs_compile": 0.97,
        "timing_shapes": ["M=8192,N=8192"], "dtype": "float16", "timings_meaningful": True}
FAIL = {"correctness": "FAIL", "failed_stage": "edge shapes",
        "message": "M=3,N=1023 float16: max abs error 0.5 at (2, 1022)"}


def context(**changes) -> AgentContext:
    fields = dict(kernel_type="softmax", kernel_source=KERNEL, last_result=FAIL,
                  history=[{"experiment": 1, "description": "BLOCK 32 -> 64", "status": "keep", "correctness": "PASS",
                            "throughput": 1234.5678, "speedup_vs_pytorch": 1.42, "message": ""},
                           {"experiment": 2, "description": "drop the column mask", "status": "revert",
                            "correctness": "FAIL", "throughput": None, "speedup_vs_pytorch": None,
                            "message": "edge | shapes\nfailed"}],
                  best_versions=[(KERNEL, PASS), (OLDER_KERNEL, PASS)], program="PLAYBOOK TEXT",
                  job={"rank": 2, "kernel_type": "softmax", "shapes": [{"M": 4096, "N": 50257}], "dtype": "bfloat16",
                       "gpu": "NVIDIA H100 80GB HBM3", "baseline": PASS})
    fields.update(changes)
    return AgentContext(**fields)


def test_prompt_carries_program_kernel_error_history_best_versions_and_job():
    system, user = build_messages(context())
    assert "PLAYBOOK TEXT" in system
    assert KERNEL.rstrip() in user
    assert "correctness=FAIL at edge shapes" in user and "max abs error 0.5 at (2, 1022)" in user
    assert "| 1 | keep | PASS | 1235 | 1.42 | BLOCK 32 -> 64 |" in user
    assert "| 2 | revert | FAIL | - | - | drop the column mask | edge / shapes failed |" in user
    assert OLDER_KERNEL.rstrip() in user
    assert "(This is the current kernel.py below.)" in user
    assert "M=4096,N=50257" in user and "bfloat16" in user
    assert "def softmax(x: torch.Tensor)" in user, "the reference defines the math"
    assert user.rstrip().endswith("```"), "the reply format comes last"


def test_first_experiment_says_so_and_skips_empty_sections():
    _, user = build_messages(context(last_result=None, history=[], best_versions=[]))
    assert "first experiment" in user
    assert "Recent experiments" not in user and "Best versions" not in user


def test_pass_result_reports_speed_headroom_and_bound():
    text = describe_result(PASS)
    for fragment in ("throughput 1235 GB/s", "37.5% of peak", "memory-bound", "1.42x vs PyTorch", "M=8192,N=8192"):
        assert fragment in text


def test_interpreter_timings_are_flagged():
    assert "say nothing about GPU speed" in describe_result({**PASS, "timings_meaningful": False})


def test_long_error_keeps_both_ends():
    message = "stage summary " + "x" * 10000 + " root cause"
    text = describe_result({**FAIL, "message": message})
    assert "stage summary" in text and "root cause" in text and "characters cut" in text
    assert len(text) < 4000


def test_format_reply_round_trips():
    assert parse_reply(format_reply("BLOCK 64 -> 128", KERNEL)) == ("BLOCK 64 -> 128", KERNEL)


def test_parse_tolerates_prose_and_markdown_and_takes_the_full_file_over_a_snippet():
    reply = ("I looked at the kernel.\n\n**Description:** use   exp2 instead of exp\n\n"
             "The key line:\n```python\ny = tl.exp2(x)\n```\nFull file:\n```python\n" + KERNEL + "```\nDone.")
    assert parse_reply(reply) == ("use exp2 instead of exp", KERNEL)


def test_code_with_a_syntax_error_is_still_a_proposal():
    broken = "def kernel_fn(x:\n    return\n"
    assert parse_reply(format_reply("broken on purpose", broken))[1] == broken


@pytest.mark.parametrize("reply, complaint", [
    ("```python\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("DESCRIPTION:   \n```python\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("```python\n# DESCRIPTION: inside the code\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("DESCRIPTION: faster\nHere is the idea, but no code.", "no ```python code block"),
    ("DESCRIPTION: faster\n```python\n\n```\n", "empty"),
    ("DESCRIPTION: faster\n```python\n" + KERNEL, "ended inside a code block"),
])
def test_malformed_replies_are_rejected(reply, complaint):
    with pytest.raises(ValueError, match=complaint.replace("(", r"\(")):
        parse_reply(reply)


def test_truncated_reply_names_the_token_limit():
    with pytest.raises(ValueError, match="token limit inside a code block"):
        parse_reply("DESCRIPTION: faster\n```python\n" + KERNEL, truncated=True)
    with pytest.raises(ValueError, match="the reply hit the token limit"):
        parse_reply("DESCRIPTION: faster\nLet me think", truncated=True)


def test_description_is_one_bounded_line():
    description, _ = parse_reply(format_reply("x" * 500, KERNEL))
    assert description == "x" * 200


@pytest.fixture(scope="module")
def extracted_job(tmp_path_factory) -> dict:
    """The first job extract writes from a real profile of models/llama.py (config=tiny, CPU), not a hand-built dict."""
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel import jobs as kernel_jobs
    from autokernel import models, profiler
    from autokernel.paths import ROOT

    workspace = tmp_path_factory.mktemp("workspace")
    loaded = models.load_model(ROOT / "models" / "llama.py", input_shape=(1, 8), device="cpu",
                               model_kwargs={"config": "tiny", "n_layers": 1, "vocab_size": 128})
    profiler.profile_to_workspace(loaded.model, loaded.inputs, name=loaded.name, workspace=workspace,
                                  warmup=0, iters=1)
    # As the loop hands it to the agent: the Job's JSON (plus the baseline, once it is measured).
    return kernel_jobs.extract_jobs(workspace / profiler.PLAN_FILE, 1, workspace)[0].to_json()


def test_prompt_from_an_extracted_job_carries_the_gpu_its_peaks_and_the_per_shape_speedups(extracted_job,
                                                                                           monkeypatch):
    from autokernel import hardware

    job = extracted_job
    shape = job["shape_args"][0]
    timed = {**PASS, "timings": [{"shape": shape, "latency_us": 40.0, "pytorch_latency_us": 60.0,
                                  "compile_latency_us": 50.0}]}
    monkeypatch.setattr(hardware, "detect", lambda *args: hardware.lookup("NVIDIA H100 80GB HBM3"))
    ctx = context(kernel_type=job["kernel_type"], job=job, last_result=timed)
    _, user = build_messages(ctx)
    assert "GPU: NVIDIA H100 SXM; peaks: fp16 989.4 TFLOP/s" in user and "memory 3350 GB/s" in user
    assert f"| {shape} | 40 | 60 | 50 | 1.25x |" in user           # against the faster of eager and compile
    assert f"Model: {job['model']}, dtype {job['dtype']}" in user


def _judged(job: dict, gpu, latency_us: float, compiled: list[dict]) -> dict:
    """A passing bench result for the job's first shape, its `limits` made as bench.py makes them."""
    import torch

    from autokernel import limits, registry

    shape = job["shapes"][0]
    summary = limits.summarize(registry.get(job["kernel_type"]), getattr(torch, job["dtype"]), gpu,
                               [(shape, latency_us)], compiled, tf32=False)
    return {**PASS, "dtype": job["dtype"], "timing_shapes": [registry.format_shape(shape)], "compiled": compiled,
            "timings": [{"shape": registry.format_shape(shape), "latency_us": latency_us,
                         "pytorch_latency_us": 2 * latency_us, "compile_latency_us": None}],
            "limits": summary.to_json(), "timings_meaningful": gpu.is_gpu}


def test_the_prompt_says_what_limits_the_kernel_at_the_jobs_shape(extracted_job, monkeypatch):
    from autokernel import hardware, registry

    h100 = hardware.lookup("NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(hardware, "detect", lambda *args: h100)
    job = extracted_job
    kt = registry.get(job["kernel_type"])
    shape = job["shapes"][0]
    moved = kt.bytes_moved(shape, 2 if job["dtype"] in ("float16", "bfloat16") else 4)
    latency_us = moved / (0.25 * 3350e9) * 1e6            # a quarter of the H100's bandwidth
    stand_in = [{"kernel": "_stand_in_kernel", "registers": 255, "spills": 12, "shared_bytes": 0, "num_warps": 8,
                 "num_stages": 1}]                      # the interpreter compiles nothing: the figures a GPU reports
    _, user = build_messages(context(kernel_type=job["kernel_type"], job=job,
                                     last_result=_judged(job, h100, latency_us, stand_in)))
    section = user[user.index("## What limits the kernel (the last experiment)"):]
    section = section[:section.index("\n## ")]
    assert f"- {registry.format_shape(shape)} (measured): " in section
    assert "= 25% of peak bandwidth" in section
    bound = "memory" if kt.flops(shape) / moved < 66.9e12 / 3350e9 else "compute"
    assert f"{bound}-bound" in section
    assert ("- _stand_in_kernel (theoretical occupancy): 256 threads/block, 1 blocks/SM, 8 warps = 12.5% occupancy, "
            "limited by registers") in section


def test_under_the_interpreter_the_prompt_says_there_are_no_gpu_figures(extracted_job):
    from autokernel import hardware

    result = _judged(extracted_job, hardware.CPU_INTERPRETER, 1234.0, [])
    _, user = build_messages(context(kernel_type=extracted_job["kernel_type"], job=extracted_job, last_result=result))
    assert "what limits this kernel: no GPU figures: the kernel ran in Triton's CPU interpreter" in user
    assert "GB/s =" not in user.split("## What limits the kernel")[1].split("\n## ")[0]


def test_the_limits_of_the_best_kept_version_stand_in_for_a_failed_experiment():
    from autokernel import hardware

    job = {"rank": 1, "kernel_type": "softmax", "shapes": [{"M": 4096, "N": 8192}], "dtype": "float16"}
    best = _judged(job, hardware.lookup("NVIDIA H100 80GB HBM3"), 100.0, [])
    _, user = build_messages(context(job=job, last_result=FAIL, best_versions=[(KERNEL, best)]))
    assert "## What limits the kernel (the latest passing version)" in user and "M=4096,N=8192 (measured)" in user


def test_the_compiled_kernels_figures_reach_the_prompt():
    result = {"correctness": "PASS", "throughput": 1500.0, "throughput_unit": "GB/s", "latency_us": 160.0,
              "compiled": [{"kernel": "_softmax_rows", "registers": 40, "spills": 0, "shared_bytes": 16384,
                            "num_warps": 8, "num_stages": 2}]}
    assert ("compiled _softmax_rows: 40 registers per thread, 0 spilled, 16384 bytes of shared memory, 8 warps, "
            "2 stages") in describe_result(result)


@pytest.mark.parametrize("backend, expected", [(None, "Backend: Triton"), ("triton", "Backend: Triton"),
                                               ("cuda", 'BACKEND = "cuda"'), ("any", "Backend: any")])
def test_the_job_names_its_backend(backend, expected):
    job = {**context().job, **({"backend": backend} if backend else {})}     # jobs saved before --backend: Triton
    _, user = build_messages(context(job=job))
    assert expected in user


def test_with_several_gpus_the_prompt_names_the_candidates_being_judged():
    _, user = build_messages(context(in_flight=["BLOCK 64 -> 128", "num_warps 4 -> 8"]))
    assert "Being judged right now on other GPUs" in user
    assert "- BLOCK 64 -> 128\n- num_warps 4 -> 8" in user and "Propose a different idea" in user
    for alone in (None, []):
        assert "Being judged right now" not in build_messages(context(in_flight=alone))[1]
