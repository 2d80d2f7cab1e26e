"""What the pool, parallel-loop and Ray tests share: candidates for tests/fake_judge.py, and a whole run.

`run(root, ...)` starts (or resumes) a run of the built-in agent over softmax jobs whose starters
carry TUNABLES the fake judge turns into latencies; `python -m tests.pool_helpers ROOT [resume]`
does it in a process of its own, which a test can SIGKILL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autokernel import paths, results
from autokernel.contracts import Job, JudgeTask, RunSettings
from tests.loop_helpers import git, make_repo  # noqa: F401 (the tests' shared repository)

FAKE_JUDGE = Path(__file__).resolve().parent / "fake_judge.py"


def kernel(a: int = 1, b: int = 4, *, sleep: float = 0.0, verdict: str | None = None, extra: str = "") -> str:
    """A softmax candidate the fake judge times at 100/a + 10*b us; the built-in search can walk A and B."""
    lines = ["KERNEL_TYPE = 'softmax'", f"# fake-sleep: {sleep}"] + ([f"# fake-verdict: {verdict}"] if verdict else [])
    lines += [f"TUNABLES = {{'A': {a}, 'B': {b}}}", "TUNABLE_CHOICES = {'A': [1, 2, 4, 8], 'B': [1, 2, 3, 4]}",
              extra, "", "def kernel_fn(x):", "    return x", ""]
    return "\n".join(lines)


def task(source: str, timeout_s: float = 60.0, seed: int = 1) -> JudgeTask:
    return JudgeTask(kernel_source=source, kernel_type="softmax", shapes=[{"M": 4, "N": 64}], dtype="float32",
                     timeout_s=timeout_s, seed=seed, extra_args=["--quick"], bench_script=str(FAKE_JUDGE))


def jobs(root: Path, count: int = 2, sleep: float = 0.0) -> list[Job]:
    made = []
    for rank in range(1, count + 1):
        path = root.parent / f"kernel_{rank}_softmax.py"
        path.write_text(kernel(1, 4, sleep=sleep))
        made.append(Job(rank=rank, kernel_type="softmax", path=str(path), shapes=[{"M": 4, "N": 64}],
                        dtype="float32"))
    return made


def run(root: Path, *, resume: bool = False, gpus: int = 2, ray: str | None = None, sleep: float = 0.0,
        budget_s: float = 600, checkpoint=None):
    """A whole run on root with the fake judge (paths pointed at root, bench.py replaced, both put back after)."""
    import os

    from autokernel import session
    from autokernel.live import ProgressView

    saved_paths, saved_env = dict(vars(paths)), os.environ.get(paths.WORKDIR_VARIABLE)
    paths.use_workdir(root)
    paths.BENCH_SCRIPT = FAKE_JUDGE
    settings = RunSettings(budget_s=budget_s, agent="builtin", gpus=gpus, ray=ray, max_consecutive_reverts=3)
    plan = None if resume else (lambda log: jobs(root, 2, sleep))
    try:
        return session.run_optimization(plan=plan, settings=settings, tag="par", resume=resume,
                                        view=ProgressView(interactive=False), checkpoint=checkpoint)
    finally:
        for name in ("ROOT", "KERNEL_FILE", "WORKSPACE", "OPTIMIZED_DIR", "MANIFEST_FILE", "RESULTS_TSV",
                     "BENCH_SCRIPT"):
            setattr(paths, name, saved_paths[name])
        if saved_env is None:
            os.environ.pop(paths.WORKDIR_VARIABLE, None)
        else:
            os.environ[paths.WORKDIR_VARIABLE] = saved_env


def kept_rows(root: Path) -> list[dict]:
    return [row for row in results.read_rows(root / "results.tsv") if row["status"] == "keep"]


if __name__ == "__main__":        # python -m tests.pool_helpers ROOT new|resume SLEEP
    state = run(Path(sys.argv[1]), resume=sys.argv[2] == "resume", sleep=float(sys.argv[3]))
    print(json.dumps({"done": state.done, "experiment": state.experiment}))
