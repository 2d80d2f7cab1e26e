"""The three recipes of docs/architecture.md ("Recipes"), each followed step by step: a new kernel type, a new agent
and a new judge stage, each made only as the recipe says and then seen working where the recipe says it is picked up.
A recipe that goes stale (a step missing, a file moved) fails here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from autokernel import cli
from autokernel.agents import base, factory
from autokernel.core import contracts
from autokernel.judge import bench
from autokernel.judge.correctness import CheckFailure

ROOT = Path(__file__).resolve().parents[1]
RECIPES = (ROOT / "docs" / "architecture.md").read_text().split("## Recipes", 1)[1]

# ---------------------------------------------------------------- add a kernel type
TOY = "toy_scale"
TOY_REFERENCE = '''

def toy_scale(x: torch.Tensor) -> torch.Tensor:
    """Twice x (the recipe's test type)."""
    return x * 2
'''
TOY_TYPE = '''"""toy_scale: the recipe's test type."""

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import KernelType, randn


def inputs(s, dtype, gen, device):
    return {"x": randn((s["M"], s["N"]), dtype, gen, device)}


SHAPES = [{"M": 3, "N": 5}, {"M": 4, "N": 64}]
KERNEL_TYPE = KernelType(
    name="toy_scale", reference=reference.toy_scale, make_inputs=inputs, description="twice an (M, N) tensor",
    smoke_shape={"M": 2, "N": 8}, sweep=SHAPES, cpu_sweep=SHAPES, edge_shapes=SHAPES, cpu_edge_shapes=SHAPES,
    timing_shape={"M": 4, "N": 64}, adversarial=[], bytes_moved=lambda s, e: 2.0 * s["M"] * s["N"] * e,
    flops=lambda s: 1.0 * s["M"] * s["N"])
'''
TOY_STARTER = '''"""toy_scale starter: twice x, one block of elements per program."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "toy_scale"
TUNABLES = {"BLOCK": 64}
TUNABLE_CHOICES = {"BLOCK": [64, 128]}


@triton.jit
def _twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(y_ptr + offsets, (x * 2).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _twice[(triton.cdiv(x.numel(), TUNABLES["BLOCK"]),)](x, y, x.numel(), BLOCK=TUNABLES["BLOCK"])
    return y
'''


def _copy_project(to: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("autokernel", "kernels"):
        shutil.copytree(ROOT / folder, to / folder, ignore=ignore)
    for file in ("reference.py", "bench.py", "pyproject.toml"):      # the three make the copy a clone (core/paths.py)
        shutil.copy(ROOT / file, to / file)


def test_the_kernel_type_recipe_gives_a_type_the_judge_and_reference_py_know(tmp_path):
    for step in ("autokernel/kernel_types/references.py", "autokernel/kernel_types/<name>.py", "kernels/<name>.py",
                 "paths.starter_path", "python -m autokernel.judge.bench --kernel kernels/<name>.py"):
        assert step in RECIPES
    project = tmp_path / "project"
    _copy_project(project)
    # 1. the reference; 2. the type's module; 3. the starter. Nothing else.
    with open(project / "autokernel" / "kernel_types" / "references.py", "a") as references:
        references.write(TOY_REFERENCE)
    (project / "autokernel" / "kernel_types" / f"{TOY}.py").write_text(TOY_TYPE)
    (project / "kernels" / f"{TOY}.py").write_text(TOY_STARTER)
    env = {**os.environ, "PYTHONPATH": str(project), "TRITON_INTERPRET": "1"}
    listed = subprocess.run([sys.executable, "reference.py"], cwd=project, env=env, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0 and "toy_scale(x: torch.Tensor) -> torch.Tensor" in listed.stdout, listed.stderr
    where = f"from autokernel.core import paths; print(paths.starter_path({TOY!r}))"
    starter = subprocess.run([sys.executable, "-c", where], cwd=project, env=env, capture_output=True, text=True,
                             timeout=60)
    assert starter.stdout.strip() == str(project / "kernels" / f"{TOY}.py"), starter.stderr    # what extract stamps
    judged = subprocess.run([sys.executable, "-m", "autokernel.judge.bench", "--kernel", f"kernels/{TOY}.py"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert "kernel_type=toy_scale correctness=PASS" in judged.stdout, judged.stdout[-2000:] + judged.stderr[-2000:]


# ---------------------------------------------------------------- add an agent
class EchoAgent(base.Agent):
    """The recipe's agent: it proposes the current kernel again, once."""
    name = kind = "echo"
    model = base_url = None

    def __init__(self):
        self.asked = 0

    def propose(self, ctx: base.AgentContext) -> base.Proposal:
        self.asked += 1
        if self.asked > 1:
            raise base.SearchExhausted("echoed once")
        return base.Proposal("the same kernel again", ctx.kernel_source)


def test_the_agent_recipe_gives_an_agent_the_factory_makes_and_the_loop_can_ask(monkeypatch):
    for step in ("`Agent` (`autokernel/agents/base.py`)", "`AGENT_KINDS`", "`make_agent`"):
        assert step in RECIPES
    # 2. its kind, which the command line then offers, and a branch in make_agent.
    with pytest.raises(SystemExit):
        cli._build_parser().parse_args(["optimize", "model.py", "--agent", "echo"])
    monkeypatch.setattr(contracts, "AGENT_KINDS", (*contracts.AGENT_KINDS, "echo"))
    assert cli._build_parser().parse_args(["optimize", "model.py", "--agent", "echo"]).agent == "echo"
    made = factory.make_agent

    def make_agent(kind, **settings):
        return EchoAgent() if kind == "echo" else made(kind, **settings)

    monkeypatch.setattr(factory, "make_agent", make_agent)
    agent = factory.make_agent("echo")
    context = base.AgentContext("softmax", "KERNEL_TYPE = 'softmax'\n", None, [], [], "", {})
    assert agent.propose(context).kernel_source == context.kernel_source
    with pytest.raises(base.SearchExhausted):
        agent.propose(context)
    # Every hook the loop calls beyond propose has the interface's default.
    assert (agent.instant, agent.check_endpoint(), agent.has_prices(), agent.state_dict()) == (False, None, True, None)


# ---------------------------------------------------------------- add a judge stage
class _Report:
    def __init__(self):
        self.result, self.stages = {}, []

    def stage_done(self, name, cases, seconds):
        self.stages.append((name, cases))


class _Watchdog:
    def limit(self, stage, seconds):
        assert seconds > 0
        return _Nothing()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _judge_with(monkeypatch, tmp_path, stages):
    """bench.judge_kernel with these stages, on a stand-in worker whose kernel says softmax, up to the timing."""
    kernel = tmp_path / "kernel.py"
    kernel.write_text("KERNEL_TYPE = 'softmax'\n")
    monkeypatch.setattr(bench, "STAGES", stages)
    monkeypatch.setattr(bench, "Judge", lambda worker, kt, args: SimpleNamespace(timing_shapes=lambda: []))
    monkeypatch.setattr(bench, "time_kernel", lambda judge: {"timed": True})
    report = _Report()
    args = SimpleNamespace(kernel=str(kernel), dtype="float32", time_limit_scale=1.0)
    worker = SimpleNamespace(hello=lambda: "softmax")
    return bench.judge_kernel(worker, args, report, _Watchdog()), report.stages


def test_the_judge_stage_recipe_runs_a_new_stage_in_order_and_names_its_failure(monkeypatch, tmp_path):
    for step in ("`autokernel/judge/stages.py`", "`STAGES`", "`STAGE_LIMITS_S`", "`CheckFailure`"):
        assert step in RECIPES

    def stage_toy(judge) -> int:              # 1. the stage: cases checked, or CheckFailure
        if judge.fail:
            raise CheckFailure("the toy stage saw a wrong output")
        return 3

    before = [(name, lambda judge: 1) for name, _ in bench.STAGES]     # the real stages need a real worker
    staged = [*before, ("toy", lambda judge: stage_toy(SimpleNamespace(fail=False)))]     # 2. in STAGES
    monkeypatch.setitem(bench.STAGE_LIMITS_S, "toy", 30)                                # 3. its time limit
    verdict, stages = _judge_with(monkeypatch, tmp_path, staged)
    assert verdict[:3] == ("PASS", None, "") and stages[-1] == ("toy", 3) and len(stages) == len(before) + 1

    failing = [*before, ("toy", lambda judge: stage_toy(SimpleNamespace(fail=True)))]
    verdict, _ = _judge_with(monkeypatch, tmp_path, failing)
    assert verdict[:3] == ("FAIL", "toy", "the toy stage saw a wrong output")


def test_a_judge_stage_without_a_time_limit_is_the_judges_own_crash(monkeypatch, tmp_path):
    verdict, stages = _judge_with(monkeypatch, tmp_path, [("untimed", lambda judge: 1)])
    assert verdict[0] == "CRASH" and verdict[1] == "untimed" and stages == []
