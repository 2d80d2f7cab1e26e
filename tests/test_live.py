"""Tests for autokernel/core/live.py: the panel says what the loop is doing, and native output stays out of it."""

import io
import logging
import os
import re
import time

from rich.console import Console

from autokernel.agents.base import SearchExhausted
from autokernel.core import live


def test_the_panel_shows_the_phase_tokens_cost_and_when_the_budget_ends():
    status = live.LoopStatus(phase="exp 7: judging [shape sweep]", kernel="rank 1 softmax (job 1 of 2)",
                             llm_tokens=12345, llm_cached_tokens=9000, llm_reasoning_tokens=512, cost_usd=0.4567,
                             cost_complete=False,
                             deadline=time.monotonic() + 3600)
    console = Console(file=io.StringIO(), width=120)
    console.print(live._panel(status))
    text = console.file.getvalue()
    assert "exp 7: judging [shape sweep]" in text
    assert "12,345 tokens (9,000 cached, 512 reasoning), $0.46 (+ calls to a model without a price)" in text
    assert "59m59s (ends by " in text or "1h00m (ends by " in text
    assert "in flight" not in text, "one GPU: no jobs side by side to show"
    status.jobs = "1_softmax: 2 candidates on gpu0, gpu1; 2_reduce: baseline run 1 of 2 on gpu2"
    console = Console(file=io.StringIO(), width=160)
    console.print(live._panel(status))
    assert "in flight  1_softmax: 2 candidates on gpu0, gpu1; 2_reduce: baseline run 1 of 2 on gpu2" in console.file.getvalue()


def test_the_panel_claims_no_speed_for_a_best_timed_in_the_interpreter(tmp_path, monkeypatch):
    # On CPU it said "1.00x over the baseline, 0.00014x vs PyTorch's best" where status says the speed is unknown.
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from autokernel.search import gitops, loop
    from autokernel.search.budget import Budget
    from tests.loop_helpers import ScriptedAgent, fake_run_bench, make_job, make_project, result, source

    root = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))     # its results: not meaningful, as on CPU
    repo = gitops.KernelRepo(root)
    repo.start_branch("panel")
    state = RunState(tag="panel", jobs=[make_job(root, 1, source(result(100.0)))], kept_commit=repo.head(),
                     settings=RunSettings())
    console = Console(file=io.StringIO(), width=120, force_terminal=True)
    with live.ProgressView(interactive=True, console=console) as view:
        loop.OptimizationRun(state, repo=repo, agent=ScriptedAgent(SearchExhausted("done")), view=view,
                             budget=Budget(600.0)).run()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    assert "correct; speed unknown on CPU (timed in Triton's interpreter)" in text
    assert not re.search(r"\dx (over the baseline|vs PyTorch's best)", text), "no speed from the interpreter"


def test_the_panel_counts_this_runs_experiments_not_the_earlier_runs_rows(tmp_path, monkeypatch):
    # It showed the state's experiment number, which counts every earlier run's rows in results.tsv: a first
    # experiment after 5 earlier rows read "7 in all" beside status's "1 experiment and 1 baseline".
    from autokernel.core.contracts import BenchResult, RunSettings
    from autokernel.core.run_records import RunState
    from autokernel.search import gitops, loop, results
    from autokernel.search.budget import Budget
    from tests.loop_helpers import (ScriptedAgent, fake_run_bench, make_job, make_project, proposal, result,
                                    source)

    root = make_project(tmp_path / "project", monkeypatch)
    for number in range(1, 6):
        results.append_row(root / "results.tsv", results.make_row(
            experiment=number, tag="older", kernel_type="softmax", result=BenchResult.from_json(result(90.0)),
            description="an earlier run's", status="revert", wall_seconds=1.0, llm_tokens=0))
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))
    repo = gitops.KernelRepo(root)
    repo.start_branch("panel")
    state = RunState(tag="panel", jobs=[make_job(root, 1, source(result(100.0)))], kept_commit=repo.head(),
                     settings=RunSettings(), experiment=5)
    console = Console(file=io.StringIO(), width=120, force_terminal=True)
    agent = ScriptedAgent(proposal("slower", source(result(120.0))), SearchExhausted("done"))
    with live.ProgressView(interactive=True, console=console) as view:
        loop.OptimizationRun(state, repo=repo, agent=agent, view=view, budget=Budget(600.0)).run()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    shown = re.findall(r"experiments\s+(.*? on this kernel)", text)
    assert shown and shown[-1] == "1 in this run, 1 on this kernel", shown


def test_a_region_job_is_named_by_its_ops_first_in_the_runs_lines_and_status(tmp_path, monkeypatch):
    # A region's type is a hash: "5_region_f151ae235609cea3 (gemm+add)" led with the hash on every line.
    from dataclasses import replace

    from autokernel.core.contracts import RunSettings
    from autokernel.core.live import ProgressView
    from autokernel.core.run_records import RunState
    from autokernel.search import gitops, loop, session
    from autokernel.search.budget import Budget
    from tests.loop_helpers import ScriptedAgent, fake_run_bench, make_job, make_project, result, source

    project = make_project(tmp_path / "project", monkeypatch)
    monkeypatch.setattr(loop.runner, "run_bench", fake_run_bench([]))

    job = replace(make_job(project, 1, source(result(100.0))), title="gemm+add")
    repo = gitops.KernelRepo(project)
    repo.start_branch("titled")
    state = RunState(tag="titled", jobs=[job], kept_commit=repo.head(), settings=RunSettings())
    console = Console(file=io.StringIO(), width=300)
    loop.OptimizationRun(state, repo=repo, agent=ScriptedAgent(SearchExhausted("done")),
                         view=ProgressView(interactive=False, console=console), budget=Budget(600.0)).run()
    said = console.file.getvalue()
    assert "baseline for rank 1 gemm+add (softmax) (job 1 of 1)" in said
    assert "gemm+add (1_softmax) done (" in said and "in optimized_kernels/1_softmax.py" in said
    assert session.outcome_lines(state)[1].startswith("  gemm+add (1_softmax): correct; speed unknown on CPU")

    # A baseline whose second run the budget cannot pay for says so by the job's ops too.
    fake = fake_run_bench([])
    monkeypatch.setattr(loop.runner, "run_bench", lambda path, **kwargs: time.sleep(1.0) or fake(path, **kwargs))
    state = RunState(tag="short", jobs=[job], kept_commit=repo.head(), settings=RunSettings(budget_s=1.5))
    console = Console(file=io.StringIO(), width=300)
    loop.OptimizationRun(state, repo=repo, agent=ScriptedAgent(), view=ProgressView(interactive=False, console=console),
                         budget=Budget(1.5)).run()
    assert "gemm+add (1_softmax)'s baseline stands on one run" in console.file.getvalue()


def test_phases_events_and_log_records_reach_the_view():
    console = Console(file=io.StringIO(), width=200)
    view = live.ProgressView(interactive=False, console=console)
    with view:
        view.phase("profiling")
        logging.getLogger("autokernel.agents.base").info("openai:m: 100 tokens in, 50 out, $0.0010")
        view.log("exp 2 KEEP PASS")
    assert view.status.phase == "profiling"
    out = console.file.getvalue()
    assert "openai:m: 100 tokens in, 50 out, $0.0010" in out and "exp 2 KEEP PASS" in out
    logging.getLogger("autokernel.agents.base").info("after the view: not shown")
    assert "after the view" not in console.file.getvalue()


def test_the_live_panel_leaves_room_for_the_terminals_echo_of_ctrl_c():
    # A terminal echoes "^C" where the cursor is, after the panel's last line: a full-width panel let it wrap to a
    # line of its own, and the redraws that followed erased from one line too low (the panel's top border stayed).
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    with live.ProgressView(interactive=True, console=console) as view:
        view.phase("exp 3: judging")
        view.log("the run's last line")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue())
    panel = [line for line in text.splitlines() if line[:1] in "╭│╰" and line]
    assert panel and max(len(line) for line in panel) <= 80 - len("^C"), panel


def test_native_output_goes_to_the_log_file_not_the_terminal(tmp_path, capfd):
    log = tmp_path / "profile.log"
    with live.ProgressView(interactive=False) as view:
        with live.quiet_native_output(log):
            os.write(1, b"STAGE:2026-11-22 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n")
            os.write(2, b"a C++ warning\n")
            print("python print inside", flush=True)
            view.log("a loop event")
    out, err = capfd.readouterr()
    assert "a loop event" in out
    assert "ActivityProfilerController" not in out + err and "python print inside" not in out
    assert "Completed Stage" in log.read_text() and "a C++ warning" in log.read_text()


def test_the_gpus_line_gives_each_gpus_pace_and_idle_time():
    from autokernel.core.throughput import GpuUse, Throughput
    from autokernel.core.live import throughput_line

    throughput = Throughput(wall_s=3000.0, gpus={"gpu1": GpuUse(experiments=40, busy_s=3000.0),
                                                 "gpu0": GpuUse(experiments=50, busy_s=2400.0)})
    assert throughput_line(throughput, 600.0) == ("90 experiments/hour overall; gpu0 50/h idle 20m00s, "
                                                  "gpu1 40/h idle 10m00s")
    assert throughput_line(Throughput()) == "-"
    # Two experiments in the first 40 s are no rate of 180/h.
    early = Throughput(wall_s=40.0, gpus={"cpu": GpuUse(experiments=2, busy_s=30.0)})
    assert throughput_line(early) == "no rate yet (under a minute); cpu idle 0m10s"


def test_the_panel_shows_one_rate_the_runs():
    from autokernel.core.throughput import GpuUse, Throughput

    status = live.LoopStatus(deadline=time.monotonic() + 60)
    status.gpus = live.throughput_line(Throughput(wall_s=3600.0, gpus={"cpu": GpuUse(experiments=90, busy_s=3000.0)}))
    console = Console(file=io.StringIO(), width=160)
    console.print(live._panel(status))
    text = console.file.getvalue()
    assert text.count("/h") == 1 and "90 experiments/hour overall; cpu idle 10m00s" in text
    assert "GPUs" not in text, "the row is the run's pace, on a CPU too"


def test_torchs_warnings_and_logging_go_to_the_log_and_our_own_lines_stay(tmp_path, capfd):
    """During a run torch's warnings and its loggers' records (Inductor's autotuning errors with their tracebacks)
    go to workspace/torch.log (issue 38: 56 autotune lines reached the terminal); what the run prints stays."""
    import logging
    import warnings

    import torch  # noqa: F401  (torch's loggers and their stream handlers exist once it is imported)

    from autokernel.core.live import torch_chatter_to

    path = tmp_path / "workspace" / "torch.log"
    with torch_chatter_to(path):
        assert not path.exists(), "no file until torch says something"
        print("our own line")
        warnings.warn("TensorFloat32 tensor cores are available", UserWarning)
        try:
            raise RuntimeError("Triton Error [CUDA]: out of resource: shared memory")
        except RuntimeError:
            logging.getLogger("torch._inductor.select_algorithm").exception("Runtime error during autotuning")
    logging.getLogger("torch._inductor").warning("after the block")
    terminal = capfd.readouterr()
    written = path.read_text()
    assert "TensorFloat32" in written and "Runtime error during autotuning" in written and "out of resource" in written
    assert "our own line" in terminal.out and "our own line" not in written
    assert "TensorFloat32" not in terminal.err and "Runtime error" not in terminal.err
    assert "after the block" not in written, "torch's own handlers write where they did once the block ends"


def test_speedups_read_as_people_read_them_never_in_exponent_notation():
    # The interpreter's ratios reach 1e-4 on CPU; the report once printed "8.4e-05x".
    assert live.format_speedup(None) == "-"
    assert live.format_speedup(2.899) == "2.90x"
    assert live.format_speedup(0.0461) == "0.046x"
    assert live.format_speedup(0.0012) == "0.0012x"
    assert live.format_speedup(8.4e-05) == "<0.001x"
    assert "e" not in live.format_speedup(1e-9)
