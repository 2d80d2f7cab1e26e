"""Tests for autokernel/fleet/judge_worker.py: a candidate judged in a private folder, the full judge only when
earned."""

import glob
import io
import json
import tempfile
from dataclasses import replace

from autokernel.core.contracts import JudgeOutcome
from autokernel.fleet import judge_worker
from tests.pool_helpers import kernel, task


def test_the_full_judge_runs_only_after_a_screen_that_beat_the_best():
    before = set(glob.glob(f"{tempfile.gettempdir()}/autokernel-candidate-*"))
    screened = replace(task(kernel(1, 4)), extra_args=["--screen"], full_timeout_s=60.0)   # 140 us
    slower = judge_worker.judge(replace(screened, full_below_us=100.0), "gpu3")
    faster = judge_worker.judge(replace(screened, full_below_us=200.0), "gpu3")
    assert set(slower.bench_seconds) == {"quick"} and set(faster.bench_seconds) == {"quick", "full"}
    assert slower.gpu == faster.gpu == "gpu3" and faster.result.passed
    failing = judge_worker.judge(replace(screened, kernel_source=kernel(8, 1, verdict="FAIL"), full_below_us=1e9), "g")
    assert set(failing.bench_seconds) == {"quick"} and failing.result.correctness == "FAIL"
    assert set(glob.glob(f"{tempfile.gettempdir()}/autokernel-candidate-*")) <= before, "its private folders are gone"


def test_serve_answers_each_task_line_with_an_outcome_line():
    replies = io.StringIO()
    lines = [json.dumps(task(kernel(a, 1)).to_json()) + "\n" for a in (1, 2)]
    judge_worker.serve("gpu1", ["\n", *lines], replies)
    outcomes = [JudgeOutcome.from_json(json.loads(line)) for line in replies.getvalue().splitlines()]
    assert [o.result.latency_us for o in outcomes] == [110.0, 60.0] and {o.gpu for o in outcomes} == {"gpu1"}
