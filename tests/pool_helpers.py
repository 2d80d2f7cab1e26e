"""What the pool, parallel-loop and Ray tests share: candidates for tests/fake_judge.py, and a whole run.

`run(root, ...)` starts (or resumes) a run of the built-in agent (or, with llm_url, the OpenAI agent
talking to a tests/fake_llm_server.py there) over a softmax and a reduce job whose starters carry
TUNABLES the fake judge turns into latencies; `python -m tests.pool_helpers ROOT new|resume SLEEP
[LLM_URL]` does it in a process of its own, which a test can SIGKILL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autokernel.agents.base import Agent
from autokernel.core import paths
from autokernel.core.contracts import Job, JudgeTask, RunSettings
from autokernel.search import results
from tests.loop_helpers import git, make_repo  # noqa: F401 (the tests' shared repository)

FAKE_JUDGE = Path(__file__).resolve().parent / "fake_judge.py"


PARAMETERS = {"softmax": "x", "reduce": "x, dim=-1, op='sum'"}    # kernel_fn's, as each type's reference has them


def kernel(a: int = 1, b: int = 4, *, sleep: float = 0.0, verdict: str | None = None, extra: str = "",
           kernel_type: str = "softmax", wait_for: Path | None = None) -> str:
    """A candidate the fake judge times at 100/a + 10*b us; the built-in search can walk A and B. The judge
    waits for the file wait_for to exist before it answers, when one is given."""
    lines = [f"KERNEL_TYPE = {kernel_type!r}", f"# fake-sleep: {sleep}"] + ([f"# fake-verdict: {verdict}"] if verdict else [])
    lines += [f"# fake-wait-for: {wait_for}"] if wait_for else []
    lines += [f"TUNABLES = {{'A': {a}, 'B': {b}}}", "TUNABLE_CHOICES = {'A': [1, 2, 4, 8], 'B': [1, 2, 3, 4]}",
              extra, "", f"def kernel_fn({PARAMETERS[kernel_type]}):", "    return x", ""]
    return "\n".join(lines)


def task(source: str, timeout_s: float = 60.0, seed: int = 1) -> JudgeTask:
    return JudgeTask(kernel_source=source, kernel_type="softmax", shapes=[{"M": 4, "N": 64}], dtype="float32",
                     timeout_s=timeout_s, seed=seed, extra_args=["--quick"], bench_script=str(FAKE_JUDGE))


def jobs(root: Path, count: int = 2, sleep: float = 0.0, types: tuple[str, ...] = ("softmax", "reduce")) -> list[Job]:
    """count jobs, of the kernel types in turn (two of one type never run side by side)."""
    made = []
    for rank in range(1, count + 1):
        kernel_type = types[(rank - 1) % len(types)]
        path = root.parent / f"kernel_{rank}_{kernel_type}.py"
        path.write_text(kernel(1, 4, sleep=sleep, kernel_type=kernel_type))
        made.append(Job(rank=rank, kernel_type=kernel_type, path=str(path), shapes=[{"M": 4, "N": 64}],
                        dtype="float32"))
    return made


def run(root: Path, *, resume: bool = False, gpus: int = 2, ray: str | None = None, sleep: float = 0.0,
        budget_s: float = 600, checkpoint=None, llm_url: str | None = None):
    """A whole run on root with the fake judge (paths pointed at root, the judge stood in for, both put back after)."""
    import os

    from autokernel.core.live import ProgressView
    from autokernel.judge import runner
    from autokernel.search import session

    saved_paths, saved_env = dict(vars(paths)), os.environ.get(paths.WORKDIR_VARIABLE)
    paths.use_workdir(root)
    runner.STAND_IN_JUDGE = FAKE_JUDGE
    settings = RunSettings(budget_s=budget_s, agent="openai" if llm_url else "builtin", base_url=llm_url, gpus=gpus,
                           ray=ray, max_consecutive_reverts=3)
    plan = None if resume else (lambda log: jobs(root, 2, sleep))
    try:
        return session.run_optimization(plan=plan, settings=settings, tag="par", resume=resume,
                                        view=ProgressView(interactive=False), checkpoint=checkpoint)
    finally:
        runner.STAND_IN_JUDGE = None
        for name in ("ROOT", "KERNEL_FILE", "WORKSPACE", "OPTIMIZED_DIR", "MANIFEST_FILE", "RESULTS_TSV"):
            setattr(paths, name, saved_paths[name])
        if saved_env is None:
            os.environ.pop(paths.WORKDIR_VARIABLE, None)
        else:
            os.environ[paths.WORKDIR_VARIABLE] = saved_env


class JobScriptAgent(Agent):
    """Answers each job's propose() with that job's next scripted step (by kernel type): a Proposal, or an
    exception to raise (MalformedReply...); SearchExhausted once the job's script is done. A WaitForResults
    step is raised only while one of the job's candidates is being judged (else it is skipped), as an
    agent waits only for results that are coming."""
    name = kind = "scripted"
    model = base_url = None

    def __init__(self, scripts: dict[str, list]):
        self.scripts = {kernel_type: list(steps) for kernel_type, steps in scripts.items()}

    def check_endpoint(self):
        return None

    def propose(self, ctx):
        from autokernel.agents.base import SearchExhausted, WaitForResults

        steps = self.scripts[ctx.kernel_type]
        while steps and isinstance(steps[0], WaitForResults) and not ctx.in_flight:
            steps.pop(0)
        if not steps:
            raise SearchExhausted(f"{ctx.kernel_type}: the script is done")
        step = steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def parallel_project(root: Path, monkeypatch):
    """A project paths point at (tests/loop_helpers.py make_project), judged by the fake judge, on branch autokernel/par."""
    from autokernel.judge import runner
    from autokernel.search import gitops
    from tests.loop_helpers import make_project

    make_project(root, monkeypatch)
    monkeypatch.setattr(runner, "STAND_IN_JUDGE", FAKE_JUDGE)
    repo = gitops.KernelRepo(root)
    repo.start_branch("par")
    return repo


def parallel_run(repo, state, agent, budget=None, checkpoint=None):
    """ParallelRun over two local workers, in this process, on a parallel_project."""
    from autokernel.core.live import ProgressView
    from autokernel.fleet.pool import LocalPool
    from autokernel.search.budget import Budget
    from autokernel.search.parallel_loop import ParallelRun

    with LocalPool([0, 1]) as pool:
        return ParallelRun(state, pool=pool, repo=repo, agent=agent, checkpoint=checkpoint,
                           view=ProgressView(interactive=False), budget=budget or Budget(600)).run()


def kept_rows(root: Path) -> list[dict]:
    return [row for row in results.read_rows(root / "results.tsv") if row["status"] == "keep"]


if __name__ == "__main__":        # python -m tests.pool_helpers ROOT new|resume SLEEP [LLM_URL]
    state = run(Path(sys.argv[1]), resume=sys.argv[2] == "resume", sleep=float(sys.argv[3]),
                llm_url=sys.argv[4] if len(sys.argv) > 4 else None)
    print(json.dumps({"done": state.done, "experiment": state.experiment}))
