"""Which variant a region's starter runs first: the judge's verdict and time on each, the faster correct one first.

A region with a GEMM has two starters worth comparing (jobs.py): Inductor's code, and the menu matmul's GEMM
with the region's epilogue (gemm_variant.py); so has a depthwise convolution (depthwise_variant.py). The first
variant of the starter file is the one a job's baseline and `verify --starters` run, so on a GPU each of the two
is judged by bench.py in the sandbox (--quick: the five stages at the region's shape, then its time), as the loop
judges a kernel:
  - ours passes and is faster: it goes first;
  - ours passes but is slower: it stays, after Inductor's (the search may still move to it);
  - ours fails: it is dropped, with the judge's message, and the starter is Inductor's as before.
Inductor's code is never dropped: it is what the region had without this.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autokernel.kernel_types.regions import store
from autokernel.kernel_types.regions.record import Region

JUDGE_TIMEOUT_S = 300


@dataclass
class Verdict:
    variant: str
    correctness: str
    latency_us: float | None
    message: str = ""
    retimed: int = 0        # timings the judge did not trust before the one it kept (judge/timing_stage.py)

    def show(self) -> str:
        time = f"{self.latency_us:.1f} us" if self.latency_us else "no time"
        again = f" (timed again {self.retimed}x: a busy machine)" if self.retimed else ""
        return f"{self.variant} {self.correctness} {time}{again}" + (f" ({self.message[:120]})" if self.message else "")


def _retimed(timings: list[dict] | None) -> int:
    return sum(int(row.get("untrusted_timings", 0)) for row in timings or [])


Judge = Callable[[Path, Region], Verdict]


def judge_with_bench(path: Path, region: Region) -> Verdict:
    """bench.py on one kernel file in the sandbox (--quick), at the region's shape and dtype.

    Where no sandbox can start, because this process already runs in one (verify --starters generates the
    starters inside verify's sandbox, and user namespaces do not nest everywhere), bench.py runs as a plain
    child of this sandboxed process: what it judges here is code we generated (Inductor's and ours), never a
    kernel an LLM wrote."""
    from autokernel.judge import runner
    from autokernel.sandbox.child_env import SANDBOXED_CHILD_VARIABLE

    if os.environ.get(SANDBOXED_CHILD_VARIABLE):        # verify's sandbox: no sandbox nests here, and the home folder is hidden
        with _region_visible(region):
            return _judge_in_this_sandbox(path, region)
    with _region_visible(region):
        try:
            result = runner.run_bench(path, shapes=[region.shape()], dtype=region.definition.dtype,
                                      timeout_s=JUDGE_TIMEOUT_S, seed=1, extra_args=["--quick"],
                                      readable=[path.parent])
        except runner.SandboxError:
            return _judge_in_this_sandbox(path, region)
    return Verdict("", result.correctness, result.latency_us, result.message or "", _retimed(result.timings))


def _judge_in_this_sandbox(path: Path, region: Region) -> Verdict:
    from autokernel.core import paths
    from autokernel.judge import runner

    out = path.with_suffix(".verdict.json")
    cmd = runner.bench_command(path, shapes=[region.shape()], dtype=region.definition.dtype, seed=1,
                               extra_args=["--quick", "--json-out", str(out)])
    # Its compiler caches in the pick's own folder: the sandbox hides the home folder, where they would go.
    env = paths.module_environment({**os.environ, "XDG_CACHE_HOME": str(path.parent / "cache")})
    try:
        child = subprocess.run(cmd, cwd=paths.ROOT, capture_output=True, text=True, timeout=JUDGE_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return Verdict("", "TIMEOUT", None, f"bench.py ran past {JUDGE_TIMEOUT_S} s")
    try:
        result = json.loads(out.read_text())
    except (OSError, ValueError):
        return Verdict("", "CRASH", None, (child.stderr or child.stdout).strip()[-300:])
    return Verdict("", str(result.get("correctness")), result.get("latency_us"), result.get("message") or "",
                   _retimed(result.get("timings")))


@contextlib.contextmanager
def _region_visible(region: Region):
    """The judge's child reads the region's file from the folders AUTOKERNEL_REGION_DIRS names: add its folder."""
    folder = store.find(region.name)
    before = os.environ.get(store.FOLDERS_VARIABLE)
    if folder is not None:
        os.environ[store.FOLDERS_VARIABLE] = os.pathsep.join(p for p in (before, str(folder.parent)) if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(store.FOLDERS_VARIABLE, None)
        else:
            os.environ[store.FOLDERS_VARIABLE] = before


def judge_variants(sources: dict[str, str], region: Region, judge: Judge | None = None) -> list[Verdict]:
    """Each variant's file (that variant alone, by name) judged on its own; by bench.py unless another judge is
    given."""
    judge = judge or judge_with_bench
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="autokernel_pick_") as folder:
        for name, source in sources.items():
            path = Path(folder) / f"{region.name}_{name}.py"
            path.write_text(source)
            verdict = judge(path, region)
            verdict.variant = name
            verdicts.append(verdict)
    return verdicts


def order(variants: dict, ours: str, verdicts: list[Verdict]) -> dict:
    """The variants reordered (or ours dropped) by the verdicts on Inductor's first variant and ours."""
    by_name = {v.variant: v for v in verdicts}
    mine, theirs = by_name[ours], by_name[next(iter(variants))]
    if mine.correctness != "PASS":
        return {name: made for name, made in variants.items() if name != ours}
    if theirs.correctness != "PASS" or (mine.latency_us or float("inf")) < (theirs.latency_us or float("inf")):
        return {ours: variants[ours], **{name: made for name, made in variants.items() if name != ours}}
    return variants
