"""Tests for autokernel/fleet/judge_worker.py: a candidate judged in a private folder, the full judge only when
earned."""

import io
import json
import os
import tempfile
from dataclasses import replace

from autokernel.core.contracts import JudgeOutcome
from autokernel.fleet import judge_worker
from tests.pool_helpers import kernel, task


def test_the_full_judge_runs_only_after_a_screen_that_beat_the_best(monkeypatch):
    # The private folders this test's judging makes, and only those: other tests, run side by side, make their own.
    made, real_mkdtemp = [], tempfile.mkdtemp

    def noting_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(tempfile, "mkdtemp", noting_mkdtemp)
    screened = replace(task(kernel(1, 4)), extra_args=["--screen"], full_timeout_s=60.0)   # 140 us
    slower = judge_worker.judge(replace(screened, full_below_us=100.0), "gpu3")
    faster = judge_worker.judge(replace(screened, full_below_us=200.0), "gpu3")
    assert set(slower.bench_seconds) == {"quick"} and set(faster.bench_seconds) == {"quick", "full"}
    assert slower.gpu == faster.gpu == "gpu3" and faster.result.passed
    failing = judge_worker.judge(replace(screened, kernel_source=kernel(8, 1, verdict="FAIL"), full_below_us=1e9), "g")
    assert set(failing.bench_seconds) == {"quick"} and failing.result.correctness == "FAIL"
    candidates = [path for path in made if os.path.basename(path).startswith("autokernel-candidate-")]
    assert len(candidates) == 3 and not any(os.path.exists(path) for path in candidates), "its private folders are gone"


def test_serve_answers_each_task_line_with_an_outcome_line():
    replies = io.StringIO()
    lines = [json.dumps(task(kernel(a, 1)).to_json()) + "\n" for a in (1, 2)]
    judge_worker.serve("gpu1", ["\n", *lines], replies)
    outcomes = [JudgeOutcome.from_json(json.loads(line)) for line in replies.getvalue().splitlines()]
    assert [o.result.latency_us for o in outcomes] == [110.0, 60.0] and {o.gpu for o in outcomes} == {"gpu1"}
