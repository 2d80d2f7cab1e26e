"""Tests for autokernel/cli.py: durations, pass-through scripts, status and report, and one-line user errors.

The `optimize` error cases run the real command in a child process on a temporary copy of the
project, so the git checks look at that copy and never at this checkout.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel import cli
from autokernel.core import paths
from autokernel.core.arguments import joined_negative_values, parse_duration
from autokernel.core.contracts import SPEED_UNKNOWN, WINNER, BenchResult, Job, JudgedResult, RunSettings
from autokernel.core.run_records import JobProgress, RunState
from autokernel.search import results, run_state
from autokernel.verify.verification import EXIT_ERROR
from tests.test_orchestrate import TINY_MODEL, copy_project


@pytest.mark.parametrize("text, seconds", [("8h", 28800), ("30m", 1800), ("90s", 90), ("1h30m", 5400),
                                           ("1.5h", 5400), ("45", 45), (" 2H ", 7200)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "8x", "h", "1h-5m", "0m"])
def test_bad_durations_are_refused(text):
    with pytest.raises(Exception, match="duration"):
        parse_duration(text)


def test_bad_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["optimize", "model.py", "--budget", "soon"])
    assert exit_info.value.code == 2
    assert "bad duration 'soon'" in capsys.readouterr().err


@pytest.mark.parametrize("flags, said", [(["--budget", "-5m"], "duration '-5m' must be more than zero"),
                                         (["--kernel-budget", "-.5h"], "duration '-.5h' must be more than zero"),
                                         (["--max-cost", "-0.5"], "expected a positive number, got '-0.5'")])
def test_a_negative_value_is_its_flags_own_error_not_a_missing_argument(capsys, flags, said):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["optimize", "model.py", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "expected one argument" not in err
    # Only a value after a flag that takes one is joined to it.
    assert joined_negative_values(["--budget", "-5m", "--quick", "-5"], cli._build_parser()) == [
        "--budget=-5m", "--quick", "-5"]


def test_pass_through_runs_the_doors_module_with_its_arguments(monkeypatch, capsys):
    # A process of the package's own (python -m), never a file of the layout by its path; its exit code is the command's.
    calls = []
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, **kwargs: calls.append((cmd, kwargs)) or 3)
    assert cli.main(["verify", "--model", "m.py", "-h"]) == 3
    [(cmd, kwargs)] = calls
    assert cmd[0] == sys.executable and cmd[cmd.index("-m") + 1:] == ["autokernel.verify.verify_command", "--model",
                                                                       "m.py", "-h"]
    assert kwargs["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(Path(cli.__file__).resolve().parents[1])
    # Its messages go by what the user typed, not by the door's file name.
    assert kwargs["env"][paths.COMMAND_VARIABLE] == "autokernel verify"


def test_a_doors_messages_name_the_command_the_user_typed(monkeypatch, capsys):
    from autokernel.verify import verify_command
    monkeypatch.delenv(paths.COMMAND_VARIABLE, raising=False)
    assert verify_command.build_parser().prog == "verify.py"
    monkeypatch.setenv(paths.COMMAND_VARIABLE, "autokernel verify")
    assert verify_command.build_parser().prog == "autokernel verify"
    assert verify_command.main(["--model-arg", "config=tiny"]) == EXIT_ERROR
    assert capsys.readouterr().err.startswith("autokernel verify: name the model these flags are for")


def test_pass_through_really_starts_the_command(capfd):
    assert cli.main(["extract", "--help"]) == 0
    # The child's usage (its own flags), under the name the user typed.
    assert "usage: autokernel extract [-h] [--top TOP] [--plan PLAN]" in capfd.readouterr().out


def test_report_prints_markdown_of_a_results_file(tmp_path, capsys):
    tsv = tmp_path / "results.tsv"
    for number, status, latency in [(1, "baseline", 20.0), (2, "keep", 10.0)]:
        results.append_row(tsv, results.make_row(
            experiment=number, tag="night", kernel_type="rmsnorm", result=BenchResult("PASS", latency_us=latency),
            description="d", status=status, wall_seconds=1.0, llm_tokens=5))
    assert cli.main(["report", "--results", str(tsv)]) == 0
    assert "| rmsnorm | night | 1 | 1 | 20.0 | 10.0 | 2.00x |" in capsys.readouterr().out
    assert cli.main(["report", "--results", str(tsv), "--out", str(tmp_path / "report")]) == 0
    assert "| rmsnorm | night | 1 | 1 | 20.0 | 10.0 | 2.00x |" in (tmp_path / "report" / "report.md").read_text()
    assert (tmp_path / "report" / "progress.png").stat().st_size > 0
    capsys.readouterr()
    assert cli.main(["report", "--results", str(tsv), "--json"]) == 0
    kernel = json.loads(capsys.readouterr().out)["kernels"][0]
    assert (kernel["kernel_type"], kernel["count"], kernel["kept"], kernel["speedup_over_baseline"]) == ("rmsnorm", 2, 1, 2.0)
    for extra in ([], ["--out", str(tmp_path / "none")], ["--json"]):
        assert cli.main(["report", "--results", str(tmp_path / "absent.tsv"), *extra]) == 1
        assert "autokernel: error: no results file at" in capsys.readouterr().err


def test_report_without_matplotlib_still_writes_report_md(tmp_path, capsys, monkeypatch):
    tsv = tmp_path / "results.tsv"
    results.append_row(tsv, results.make_row(
        experiment=1, tag="night", kernel_type="rmsnorm", result=BenchResult("PASS", latency_us=20.0),
        description="d", status="baseline", wall_seconds=1.0, llm_tokens=0))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["report", "--results", str(tsv), "--out", str(tmp_path / "report")]) == 0
    out, err = capsys.readouterr()
    assert f"report written to {tmp_path / 'report' / 'report.md'}" in out
    assert "warning: progress.png needs matplotlib" in err
    assert "| rmsnorm | night |" in (tmp_path / "report" / "report.md").read_text()


def test_status_summarizes_the_saved_state(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "WORKSPACE", tmp_path)
    monkeypatch.setattr(paths, "RESULTS_TSV", tmp_path / "results.tsv")
    assert cli.main(["status"]) == 0
    assert "no run yet" in capsys.readouterr().out
    assert cli.main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"state": None, "results": None, "outcome": []}

    progress = JobProgress(baseline=JudgedResult(BenchResult("PASS", latency_us=30.0)), noise=0.02, experiments=3,
                           best=JudgedResult(BenchResult("PASS", latency_us=20.0, timings_meaningful=True),
                                             wins_at=["M=1"]))
    finished = {"file": "1_matmul.py", "speedup_over_baseline": 1.8, "best_speedup_vs_pytorch": 1.1,
                "experiments": 9, "stopped_because": "5 reverts in a row", "verdict": WINNER}
    jobs = [Job(rank=rank, kernel_type=kernel_type, dtype="float16", shapes=[], path=f"kernel_{rank}.py")
            for rank, kernel_type in ((1, "matmul"), (2, "softmax"), (3, "rmsnorm"))]
    run_state.save(RunState(tag="night", jobs=jobs, kept_commit="abc", settings=RunSettings(budget_s=7200), job_index=1,
             experiment=14, elapsed_s=3600, current=progress, finished=[finished], llm_tokens=1200, cost_usd=0.5,
             llm_cached_tokens=700, llm_reasoning_tokens=100,
             stopped_because="the run's time budget is spent"))
    results.append_row(paths.RESULTS_TSV, results.make_row(
        experiment=14, tag="night", kernel_type="softmax", result=BenchResult("PASS"), description="d",
        status="keep", wall_seconds=1.0, llm_tokens=0))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    # Experiment 14 is this run's only row (13 are an earlier run's): counted as the report counts them.
    assert ("run night (branch autokernel/night): stopped: the run's time budget is spent; 1 experiment and 0 "
            "baselines, 1h00m of 2h00m used, 1200 LLM tokens, 700 of them cached and 100 reasoning ($0.50)") in out
    assert "1_matmul: done, 1.80x over its baseline, 1.10x vs PyTorch eager (9 experiments; 5 reverts in a row)" in out
    assert "2_softmax: cut short after 3 experiments, best 1.50x over its baseline, best so far saved" in out
    assert "3_rmsnorm: no baseline yet" in out
    assert "autokernel optimize --resume" in out
    assert "results.tsv: 1 row for this run, 1 kept" in out
    assert cli.main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state"]["settings"]["budget_s"] == 7200 and report["results"] == {"rows": 1, "kept": 1}
    assert RunState.from_json(report["state"]) == run_state.load()
    # On CPU (the interpreter's timings), no speed is claimed and no kernel is a winner.
    state = run_state.load()
    state.finished[0].update(timings_meaningful=False, verdict=SPEED_UNKNOWN)
    state.current.best.bench.timings_meaningful = False
    run_state.save(state)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert ("1_matmul: correct; speed unknown on CPU (timed in Triton's interpreter, which says nothing of speed), "
            "saved (9 experiments; 5 reverts in a row)") in out
    assert "2_softmax: cut short after 3 experiments, correct; speed unknown on CPU, best so far saved" in out
    assert "winner" not in out and "1.80x" not in out and "1.50x" not in out


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = copy_project(tmp_path_factory.mktemp("cli") / "project")
    (root.parent / "model.py").write_text(TINY_MODEL)
    return root


def _autokernel(project, *args: str, env_extra=None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(project.parent), "PYTHONPATH": str(project), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "autokernel.cli", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def _one_error_line(completed: subprocess.CompletedProcess) -> str:
    assert completed.returncode == cli.EXIT_ERROR, completed.stderr
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("autokernel: error: ")
    return lines[0]


def test_missing_model_file_is_one_line(project):
    line = _one_error_line(_autokernel(project, "optimize", "no_such_model.py", "--agent", "builtin"))
    assert "no_such_model.py" in line


@pytest.mark.slow
def test_after_an_unfinished_run_the_commands_own_errors_come_first_and_new_is_offered(project):
    jobs = [Job(rank=1, kernel_type="softmax", dtype="float32", shapes=[], path="kernel_1.py")]
    state_path = project / "workspace" / "state.json"
    run_state.save(RunState(tag="lastnight", jobs=jobs, kept_commit="abc", settings=RunSettings(),
                            stopped_because="the run's time budget is spent"), state_path)
    try:
        missing = _one_error_line(_autokernel(project, "optimize", "no_such_model.py", "--agent", "builtin"))
        assert "Model file not found: no_such_model.py" in missing
        refused = _one_error_line(_autokernel(project, "optimize", "../model.py", "--agent", "builtin"))
        assert "holds run 'lastnight', unfinished: pass --resume to continue it, or --new to start a new run" in refused
        both = _autokernel(project, "optimize", "--resume", "--new")
        assert both.returncode == 2 and "--new: not allowed with argument --resume" in both.stderr
    finally:
        state_path.unlink()


def test_outside_any_repository_optimize_refuses_and_creates_nothing(project, tmp_path):
    # The clone's layout (an editable install): the clone itself must not become the work folder.
    outside = tmp_path / "somewhere"
    outside.mkdir()
    (outside / "model.py").write_text(TINY_MODEL)
    lock = project / "workspace" / "run.lock"
    before = lock.stat().st_mtime_ns if lock.exists() else None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(project)}
    done = subprocess.run([sys.executable, "-m", "autokernel.cli", "optimize", "model.py", "--agent", "builtin"],
                          cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    line = _one_error_line(done)
    assert f"{outside} is not inside a git repository" in line and "--workdir" in line
    assert sorted(path.name for path in outside.iterdir()) == ["model.py"]
    assert (lock.stat().st_mtime_ns if lock.exists() else None) == before, "nothing touched in the clone"


@pytest.mark.slow
def test_missing_api_key_is_one_line(project):
    line = _one_error_line(_autokernel(project, "optimize", "../model.py", "--agent", "anthropic"))
    assert "ANTHROPIC_API_KEY" in line


def test_dirty_tree_is_one_line(project):
    bench = project / "bench.py"
    original = bench.read_text()
    bench.write_text(original + "# edited\n")
    try:
        line = _one_error_line(_autokernel(project, "optimize", "../model.py", "--agent", "builtin"))
    finally:
        bench.write_text(original)
    assert "uncommitted changes (bench.py)" in line


def test_resume_without_a_saved_run_is_one_line(project):
    line = _one_error_line(_autokernel(project, "optimize", "--resume", "--agent", "builtin"))
    assert "nothing to resume" in line


def test_a_foreign_results_file_is_one_line_and_creates_nothing(project):
    (project / "results.tsv").write_text("experiment\ttag\tsomething else\n")
    try:
        line = _one_error_line(_autokernel(project, "optimize", "../model.py", "--agent", "builtin"))
    finally:
        (project / "results.tsv").unlink()
    assert "move it aside" in line
    assert "autokernel/" not in subprocess.run(["git", "branch"], cwd=project, capture_output=True, text=True).stdout
    assert not (project / "workspace" / "state.json").exists()


def test_backend_reaches_the_planner_and_bad_ones_are_refused(monkeypatch, capsys, tmp_path):
    from autokernel.profile import planning
    from autokernel.search import session

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(TINY_MODEL)
    monkeypatch.setenv(paths.WORKDIR_VARIABLE, str(tmp_path))     # a work folder named: not outside any repository
    seen = {}

    def planner(**kwargs):
        seen.update(kwargs)
        return "the plan"

    monkeypatch.setattr(planning, "model_file_planner", planner)
    monkeypatch.setattr(session, "run_optimization", lambda **kwargs: "the state")
    monkeypatch.setattr(session, "outcome_lines", lambda state: [])
    assert cli.main(["optimize", "model.py", "--backend", "cuda", "--agent", "builtin"]) == 0
    assert seen["backend"] == "cuda" and seen["model"] == "model.py"
    assert cli.main(["optimize", "model.py", "--agent", "builtin"]) == 0
    assert seen["backend"] == "triton"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["optimize", "model.py", "--backend", "cpp"])
    assert exit_info.value.code == 2 and "invalid choice: 'cpp'" in capsys.readouterr().err
