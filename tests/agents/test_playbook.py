"""program.md as the agent reads it: the sections for its job only (autokernel/agents/playbook.py), and every
claim about what the judge checks or times read beside the judge's own constants."""

import ast
import re

import pytest

from autokernel.agents import playbook
from autokernel.agents.base import AgentContext
from autokernel.agents.prompt import build_messages
from autokernel.core import dtypes, hardware
from autokernel.core.paths import PROGRAM_MD, ROOT
from autokernel.judge import correctness, timing
from autokernel.kernel_types import registry

PROGRAM = PROGRAM_MD.read_text()
SYSTEM_LIMIT = 12_000
OTHER_TYPES_SECTIONS = ("### LayerNorm", "### Cross-entropy", "### Flash attention", "### Fused MLP", "### Matmul",
                        "### RMSNorm + linear", "### Rotary", "### Reduce", "## Fused types")
H100 = hardware.Platform(hardware.lookup("NVIDIA H100 80GB HBM3"), triton="3.6.0", cuda="13.0", torch="2.11.0")


def system_for(kernel_type: str, backend: str, shape: dict) -> str:
    job = {"rank": 1, "kernel_type": kernel_type, "shapes": [shape], "dtype": "float16", "backend": backend}
    ctx = AgentContext(kernel_type=kernel_type, kernel_source="", last_result=None, history=[], best_versions=[],
                       program=PROGRAM, job=job, platform=H100)
    return build_messages(ctx).system


@pytest.mark.parametrize("shape", [{"M": 64, "N": 512}, {"M": 8192, "N": 8192}])    # latency-, memory-bound
def test_a_triton_softmax_jobs_system_message_holds_its_sections_only(shape):
    system = system_for("softmax", "triton", shape)
    assert len(system) <= SYSTEM_LIMIT
    assert "CUDA C++" not in system and not any(title in system for title in OTHER_TYPES_SECTIONS)
    for needed in ("## Hard rules", "## What bench.py checks", "## Your reply", "### Softmax", "## Tier 1"):
        assert needed in system
    assert "<!--" not in system and "### By hand" not in system, "notes and people's sections are not sent"


@pytest.mark.parametrize("kernel_type, backend, expected, absent", [
    ("softmax", "cuda", ["## CUDA C++ kernels", "### Softmax"], ["## Tier 1"]),
    ("rmsnorm_mlp", "any", ["## CUDA C++ kernels", "## Fused types", "### Fused MLP", "## Tier 1"], ["### Softmax"]),
    ("matmul", "triton", ["### Matmul", "### Tensor cores and TF32"], ["## CUDA C++ kernels", "### Softmax"]),
])
def test_each_job_gets_its_backend_type_and_regime_sections(kernel_type, backend, expected, absent):
    shape = registry.get(kernel_type).timing_shape
    system = system_for(kernel_type, backend, shape)
    assert all(title in system for title in expected) and not any(title in system for title in absent)


def test_section_notes_are_checked():
    assert playbook.is_for({"type:softmax", "regime:latency"}, kernel_type="softmax", backend="cuda", regime="latency")
    assert not playbook.is_for({"triton"}, kernel_type="softmax", backend="cuda", regime="memory")
    assert not playbook.is_for({"people"}, kernel_type="softmax", backend="triton", regime="memory")
    with pytest.raises(ValueError, match="unknown section tags"):
        playbook.is_for({"sofmax"}, kernel_type="softmax", backend="triton", regime="memory")
    for section in playbook.sections(PROGRAM):       # every note in program.md is a known one
        playbook.is_for(section.tags, kernel_type="softmax", backend="triton", regime="memory")


# --------------------------------------------------------------------------- program.md beside the judge
def _bench_constant(name: str):
    """A constant of the judge's, read from its source where it lives (the stages, the timing stage)."""
    tree = ast.parse("".join((ROOT / "autokernel" / "judge" / module).read_text()
                             for module in ("stages.py", "timing_stage.py")))
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name)
    return node.value


def test_the_stage_table_names_the_judges_stages_in_order():
    stages = [element.elts[0].value for element in _bench_constant("STAGES").elts]
    table = PROGRAM[PROGRAM.index("| stage | what |"):].split("\n\n")[0]
    assert [row.split("|")[1].strip() for row in table.splitlines()[2:]] == stages


def test_the_shapes_and_tolerances_program_md_states_are_the_judges():
    sweeps = [len(kt.sweep) for kt in registry.REGISTRY.values()]
    assert f"| shape sweep | {min(sweeps)}-{max(sweeps)} shapes x float16, bfloat16, float32 |" in PROGRAM
    for kt in registry.REGISTRY.values():
        sizes = {value for shape in kt.edge_shapes for value in shape.values() if isinstance(value, int)}
        assert {1023, 4097, 1537, 1} <= sizes, f"{kt.name}'s edge shapes differ from program.md's"
    assert "| edge shapes | 1023, 4097, 1537, size 1 |" in PROGRAM
    stated = re.search(r"rtol = ([\de.-]+)\s+for float16, ([\de.-]+) for bfloat16 and ([\de.-]+) for float32", PROGRAM)
    assert tuple(float(x) for x in stated.groups()) == tuple(dtypes.TOLERANCES[d] for d in dtypes.DTYPES.values())
    assert f"no case is held tighter than {correctness.LIBRARY_ERROR_FACTOR:g}x PyTorch's" in " ".join(PROGRAM.split())


def test_what_program_md_says_is_timed_is_what_the_judge_times():
    text = " ".join(PROGRAM.split())
    assert "What is timed: GPU time." in text and "launch overhead included" not in text
    assert f"flushes the L2 cache (a {timing.FLUSH_BYTES // 2**20} MiB write)" in text
    calls = {quick: [c.value for c in pair.elts] for quick, pair in
             zip((False, True), _bench_constant("TIMED_CALLS").values[0].values)}
    assert f"over {calls[False][0]}-{calls[False][1]} calls ({calls[True][0]}-{calls[True][1]} with --quick" in text
    assert (f"bytes over {timing.BANDWIDTH_MARGIN:g}x the datasheet bandwidth, FLOPs over {timing.COMPUTE_MARGIN:g}x "
            f"the fastest listed rate") in text
    # The latency the loop keeps or reverts on is the median of the events around the call, host time outside.
    bench = (ROOT / "autokernel" / "judge" / "timing_stage.py").read_text()
    assert 'ours = statistics.median(c.record["kernel_ms"] for c in calls)' in bench
    assert '"latency_us": ours_us' in bench and '"call_latency_us"' in bench
    timing_source = (ROOT / "autokernel" / "judge" / "timing.py").read_text()
    assert 'record["kernel_ms"] = clock.elapsed(after_flush, after_call)' in timing_source
    job = build_messages(AgentContext(kernel_type="softmax", kernel_source="", last_result=None, history=[],
                                      best_versions=[], program=PROGRAM, job={"kernel_type": "softmax"},
                                      platform=H100)).job
    assert "in GPU time" in job and "launch overhead included" not in job
