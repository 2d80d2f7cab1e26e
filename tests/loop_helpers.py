"""What the loop's in-process tests share: a throwaway project repository, a fake judge and scripted agents.

The fake judge reads the result a candidate should get from the candidate file itself, so a test
is fast and proves the loop wrote each proposal to kernel.py before judging it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from autokernel.agents.base import Agent, Proposal, SearchExhausted
from autokernel.core import paths
from autokernel.core.contracts import BenchResult, Job

GITIGNORE = "results.tsv\nworkspace/\n__pycache__/\n"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def subjects(root: Path) -> list[str]:
    return git(root, "log", "--format=%s").splitlines()


def result(latency: float | None, correctness: str = "PASS", pct_peak: float | None = None) -> dict:
    return {"correctness": correctness, "latency_us": latency, "pct_peak": pct_peak, "speedup_vs_pytorch": 1.0,
            "message": None if correctness == "PASS" else "wrong values"}


def bench_result(latency: float | None, correctness: str = "PASS", pct_peak: float | None = None) -> BenchResult:
    """result(...) as run_bench returns it."""
    return BenchResult.from_json(result(latency, correctness, pct_peak))


def source(*bench_results: dict) -> str:
    """A candidate whose successive bench runs give these results (the last one repeats)."""
    return (f"KERNEL_TYPE = 'softmax'\n# fake-results: {json.dumps(list(bench_results))}\n\n\n"
            f"def kernel_fn(x):\n    return x\n")


def fake_run_bench(judged: list[str]):
    def run_bench(kernel_path, *, shapes, dtype, timeout_s, seed=None, extra_args=()):
        text = Path(kernel_path).read_text()
        planned = json.loads(text.split("# fake-results: ", 1)[1].splitlines()[0])
        runs_before = judged.count(text)
        judged.append(text)
        return BenchResult.from_json(planned[min(runs_before, len(planned) - 1)])
    return run_bench


class ScriptedAgent(Agent):
    """Answers each propose() with the next scripted Proposal, or raises the next scripted exception."""
    name = kind = "scripted"
    model = base_url = None

    def __init__(self, *script):
        self.script = list(script)
        self.contexts = []

    def check_endpoint(self):
        return None

    def propose(self, ctx):
        self.contexts.append(ctx)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


class TableAgent(ScriptedAgent):
    """Proposes by how many experiments the job has seen, so a resumed run asks exactly what it would have."""

    def __init__(self, table: list):
        super().__init__()
        self.table = table

    def propose(self, ctx):
        self.contexts.append(ctx)
        done = len(ctx.history)
        step = self.table[done] if done < len(self.table) else SearchExhausted("table done")
        if isinstance(step, Exception):
            raise step
        return step


def make_repo(root: Path) -> Path:
    """A small git repository with a placeholder kernel.py, its run files ignored, one commit."""
    root.mkdir(parents=True)
    (root / "kernel.py").write_text("placeholder\n")
    (root / ".gitignore").write_text(GITIGNORE)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return root


def make_project(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small git repository that paths.* point into (state, manifest and results files included)."""
    make_repo(root)
    for name, value in {"ROOT": root, "KERNEL_FILE": root / "kernel.py", "WORKSPACE": root / "workspace",
                        "OPTIMIZED_DIR": root / "optimized_kernels",
                        "MANIFEST_FILE": root / "optimized_kernels" / "manifest.json",
                        "RESULTS_TSV": root / "results.tsv", "PROGRAM_MD": root / "program.md"}.items():
        monkeypatch.setattr(paths, name, value)
    return root


def make_job(root: Path, rank: int, starter: str) -> Job:
    path = root.parent / f"kernel_{rank}_softmax.py"
    path.write_text(starter)
    return Job(rank=rank, kernel_type="softmax", path=str(path), shapes=[{"M": 4, "N": 64}], dtype="float32",
               share=0.5, amdahl_2x=1.33)


def proposal(description: str, text: str, **tokens) -> Proposal:
    return Proposal(description, text, **tokens)
