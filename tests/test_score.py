"""Tests for autokernel/score.py and `autokernel score`: fast_p over a folder of problem files."""

import json
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from autokernel import cli
from autokernel import score
from autokernel.core import gpu_lock
from autokernel.verify.report_record import ErrorCheck, Verdict, VerifyReport

SOFTMAX_PROBLEM = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
'''
UNPLANNED_PROBLEM = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.sort(x, dim=-1).values     # a sort: no kernel type covers it, and it is no region


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return []
'''
BROKEN_PROBLEM = '''
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this problem is broken")


def get_inputs():
    return [1]


def get_init_inputs():
    return []
'''


def report(eager, compiled, handed=None, passed=True, error=0.0, meaningful=True, speedup=None) -> VerifyReport:
    """A verify report whose verdict hands over `handed` ((variant, ms) of ours; None: PyTorch's best)."""
    def variant(name, ms):
        return {"variant": name, "ms": ms, "error": None if ms is None else error}
    variants = {"eager": variant("eager", eager), "compile": variant("compile", compiled)}
    pytorch_best = min(({"variant": n, "name": n, "ms": v["ms"]} for n, v in variants.items() if v["ms"]),
                       key=lambda best: best["ms"], default=None)
    ours = None
    if handed is not None:
        variants[handed[0]] = variant(*handed)
        ours = {"variant": handed[0], "name": handed[0], "ms": handed[1]}
    faster = bool(ours and pytorch_best and ours["ms"] < pytorch_best["ms"])
    verdict = Verdict(summary="v", pytorch_best=pytorch_best, autokernel_best=ours,
                      speedup=speedup or (pytorch_best["ms"] / ours["ms"] if ours and pytorch_best else None),
                      use=ours["variant"] if faster else "compile", use_code="", faster=faster,
                      timings_meaningful=meaningful, batch_norm_folding=False)
    check = ErrorCheck(max_error=error, variant_max_error=error, tolerance=1e-2, passed=passed, definition="")
    return VerifyReport(model="m", device="cuda", device_name="gpu", dtype="float32", inputs=[], versions={},
                        optimized_dir="", plan="", replaced_share=None, kernels=[], checked={}, route_table=[],
                        variants=variants, verdict=verdict, correctness=check, tolerance=1e-2,
                        timings_meaningful=meaningful)


def test_the_speedups_are_those_of_the_path_the_verdict_hands_over():
    # AutoKernel's eager path handed over: faster than torch.compile counts, as KernelBench counts it.
    routed = score.score_report("a", report(eager=4.0, compiled=2.0, handed=("ours", 1.0)), 1.0)
    assert (routed.speedup_vs_eager, routed.speedup_vs_compile) == (4.0, 2.0)
    # PyTorch's best handed over (nothing of ours faster): what it gains on eager, and 1.0 against torch.compile,
    # even where ours ran (slower) or PyTorch eager beats torch.compile.
    for handed, eager in ((None, 4.0), (("ours_compile", 2.5), 4.0), (None, 1.5)):
        kept = score.score_report("b", report(eager=eager, compiled=2.0, handed=handed), 1.0)
        assert (kept.speedup_vs_eager, kept.speedup_vs_compile) == (eager / min(eager, 2.0), 1.0)
    # The verdict claims 1.1x, timed in turn, where its two figures say 1.25x: so does every column.
    claimed = score.score_report("c", report(eager=4.0, compiled=2.0, handed=("ours_compile", 1.6), speedup=1.1),
                                 1.0)
    assert claimed.speedup_vs_compile == pytest.approx(1.1) and claimed.speedup_vs_eager == pytest.approx(2.2)
    wrong = score.score_report("d", report(eager=4.0, compiled=2.0, error=0.5, passed=False), 1.0)
    assert not wrong.correct


def test_only_timed_problems_say_whether_the_timings_mean_anything():
    timed = score.ProblemScore("a", True, 2.0, 1.0, "", True, 1.0)
    untimed = [score.unplanned_score("b", 1.0), score.ProblemScore("c", False, None, None, "not scored", None, 1.0)]
    assert score.summary([timed, *untimed])["timings_meaningful"] is True      # a GPU run stays meaningful
    assert score.summary([score.ProblemScore("d", True, 1.0, 1.0, "", False, 1.0), *untimed])[
        "timings_meaningful"] is False


def test_fast_p_counts_only_correct_problems_faster_than_the_threshold():
    scores = [score.ProblemScore("a", True, 2.5, 1.2, "", True, 1.0), score.ProblemScore("b", True, 1.0, 0.9, "", True, 1.0),
              score.ProblemScore("c", False, 3.0, 3.0, "", True, 1.0), score.ProblemScore("d", True, 1.6, 1.0, "", True, 1.0)]
    assert score.fast_p(scores, "eager", 1.0) == 0.5          # a and d; c is wrong, b is not faster
    assert score.fast_p(scores, "eager", 1.5) == 0.5 and score.fast_p(scores, "eager", 2.0) == 0.25
    assert score.fast_p(scores, "compile", 1.0) == 0.25
    assert score.geometric_mean(scores, "eager") == pytest.approx((2.5 * 1.0 * 1.6) ** (1 / 3))
    table = score.format_table(scores)
    assert "| eager | 50% | 50% | 25% |" in table and "4 problems, 75% correct." in table


@pytest.mark.slow
def test_score_runs_every_problem_and_a_broken_one_costs_only_its_row(tmp_path, capsys):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "softmax_rows.py").write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    (folder / "broken.py").write_text(textwrap.dedent(BROKEN_PROBLEM))
    (folder / "conv_only.py").write_text(textwrap.dedent(UNPLANNED_PROBLEM))
    (folder / "helpers.py").write_text("X = 1\n")           # not a problem file: skipped
    out = tmp_path / "scores.json"
    code = cli.main(["score", str(folder), "--no-compile", "--json-out", str(out)])
    assert code == 0
    written = json.loads(out.read_text())
    rows = {row["problem"]: row for row in written["scores"]}
    assert set(rows) == {"softmax_rows", "broken", "conv_only"}
    assert rows["softmax_rows"]["correct"] and rows["softmax_rows"]["timings_meaningful"] is False
    assert not rows["broken"]["correct"] and "verify exited 2" in rows["broken"]["error"]
    # Nothing to plug in: the user keeps PyTorch's path, correct at 1.0x, with PyTorch's own paths timed.
    unplanned = rows["conv_only"]
    assert unplanned["correct"] and unplanned["speedup_vs_eager"] == 1.0 and unplanned["speedup_vs_compile"] is None
    assert unplanned["timings_meaningful"] is False and unplanned["verdict"].startswith("not planned")
    # A step that failed keeps its last lines, for the row and the JSON.
    assert rows["broken"]["error_tail"] and any("Error" in line for line in rows["broken"]["error_tail"])
    assert written["summary"]["problems"] == 3 and written["summary"]["correct"] == pytest.approx(2 / 3)
    printed = capsys.readouterr().out
    assert "| softmax_rows | yes |" in printed and "NOT MEANINGFUL" in printed


def test_a_folder_without_problem_files_is_refused(tmp_path, capsys):
    assert cli.main(["score", str(tmp_path)]) == cli.EXIT_ERROR
    assert "is not a folder of problem files" in capsys.readouterr().err


def test_a_scoring_run_goes_on_from_its_state_and_scores_problems_side_by_side(tmp_path, monkeypatch):
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("a", "b", "c", "d"):
        (folder / f"{name}.py").write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    seen = []

    def fake_problem(file, run, log, gpu):
        seen.append((file.stem, gpu))
        return score.ProblemScore(file.stem, True, 2.0, 1.5, "faster", True, 0.1)

    monkeypatch.setattr(score, "score_problem", fake_problem)
    state = tmp_path / "state.jsonl"
    first = score.score_folder(folder, budget=None, top=1, extra_args=[], compile_enabled=False, log=lambda line: None,
                               state=state, stop_after_s=0.0)
    assert first == [] and seen == []                   # stopped before any problem started
    state.write_text(json.dumps(score.ProblemScore("b", True, 1.0, 1.0, "no gain", True, 0.1).to_json()) + "\n")
    rows = score.score_folder(folder, budget=None, top=1, extra_args=[], compile_enabled=False,
                              log=lambda line: None, state=state, gpus=2)
    assert [row.problem for row in rows] == ["a", "b", "c", "d"]
    assert sorted(name for name, _ in seen) == ["a", "c", "d"] and {gpu for _, gpu in seen} <= {0, 1}
    assert sorted(row.problem for row in score.read_state(state)) == ["a", "b", "c", "d"]
    again = score.score_folder(folder, budget=None, top=1, extra_args=[], compile_enabled=False,
                               log=lambda line: None, state=state)
    assert len(seen) == 3 and [row.speedup_vs_eager for row in again] == [2.0, 1.0, 2.0, 2.0]


def test_jobs_share_a_gpu_with_their_timings_taking_turns_through_its_lock(tmp_path, monkeypatch):
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("a", "b", "c", "d", "e", "f"):
        (folder / f"{name}.py").write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    at_once, lock = {"now": 0, "most": 0}, threading.Lock()
    environments = []

    def fake_problem(file, run, log, gpu):
        environments.append(score._environment(run, gpu))
        with lock:
            at_once["now"] += 1
            at_once["most"] = max(at_once["most"], at_once["now"])
        time.sleep(0.2)
        with lock:
            at_once["now"] -= 1
        return score.ProblemScore(file.stem, True, 2.0, 1.5, "faster", True, 0.1)
    monkeypatch.setattr(score, "score_problem", fake_problem)
    rows = score.score_folder(folder, budget=None, top=1, extra_args=[], compile_enabled=False,
                              log=lambda line: None, workdir=tmp_path / "work", gpus=2, jobs=3)
    assert len(rows) == 6 and at_once["most"] == 6          # 2 GPUs x 3 jobs
    locks = {env[gpu_lock.TIMING_LOCK_VARIABLE] for env in environments}
    assert {env["CUDA_VISIBLE_DEVICES"] for env in environments} == {"0", "1"}
    assert len(locks) == 2 and all(Path(path).is_file() for path in locks)       # one lock per GPU
    assert all(env[gpu_lock.TIMING_LOCK_VARIABLE].endswith(f"gpu{env['CUDA_VISIBLE_DEVICES']}_timing.lock")
               for env in environments)
    alone = score.ScoringRun(None, 1, [], False, tmp_path / "work")
    assert score._environment(alone, 0) is None           # one problem at a time: the process's own environment
    # Inductor's compile workers: each of the 6 runs its share of the CPUs (as the zoo's gate), unless the caller set it
    monkeypatch.delenv(gpu_lock.COMPILE_THREADS_VARIABLE, raising=False)
    monkeypatch.setattr(gpu_lock.os, "cpu_count", lambda: 32)
    side_by_side = score.ScoringRun(None, 1, [], False, tmp_path / "work", gpus=2, jobs=3)
    assert score._environment(side_by_side, 0)[gpu_lock.COMPILE_THREADS_VARIABLE] == "5"        # 32 // 6
    monkeypatch.setenv(gpu_lock.COMPILE_THREADS_VARIABLE, "2")
    assert score._environment(side_by_side, 0)[gpu_lock.COMPILE_THREADS_VARIABLE] == "2"


def test_only_the_named_problems_are_scored_and_a_wrong_name_is_refused(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "problems"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.py").write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    monkeypatch.setattr(score, "score_problem",
                        lambda file, run, log, gpu: score.ProblemScore(file.stem, True, 1.0, 1.0, "ok", True, 0.1))
    rows = score.score_folder(folder, budget=None, top=1, extra_args=[], compile_enabled=False, log=lambda line: None,
                              only=["b"])
    assert [row.problem for row in rows] == ["b"]
    assert cli.main(["score", str(folder), "--problems", "b,c"]) == cli.EXIT_ERROR
    assert "no problem files named c" in capsys.readouterr().err


def _fake_optimize(saves_a_kernel: bool):
    """score._run standing in for orchestrate.py: it commits the run's branch as a run does, with or without a
    saved kernel in optimized_kernels/."""
    import subprocess

    def run(cmd, what, scoring, env, cwd=None):
        tag = cmd[cmd.index("--tag") + 1]
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
        subprocess.run([*git, "checkout", "-q", "-b", f"autokernel/{tag}"], cwd=cwd, check=True)
        if saves_a_kernel:
            (cwd / "optimized_kernels").mkdir()
            (cwd / "optimized_kernels" / "manifest.json").write_text(json.dumps({"kernels": {"1_softmax": {}}}))
            subprocess.run([*git, "add", "-A"], cwd=cwd, check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "the run"], cwd=cwd, check=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


@pytest.mark.parametrize("saves_a_kernel", [True, False])
def test_a_budgeted_problem_is_verified_against_what_its_run_saved_even_when_that_is_nothing(
        tmp_path, monkeypatch, saves_a_kernel):
    problem = tmp_path / "softmax.py"
    problem.write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    monkeypatch.setattr(score, "_run", _fake_optimize(saves_a_kernel))
    run = score.ScoringRun("1m", 1, [], False, tmp_path / "work")
    lines = []
    folder = score._optimize(problem, run, lines.append, tmp_path / "work" / "softmax", None)
    kernels = json.loads((folder / "manifest.json").read_text())["kernels"]
    if saves_a_kernel:       # the run's own optimized_kernels/, from its branch
        assert folder.name == "optimized_kernels" and list(kernels) == ["1_softmax"] and lines == []
    else:                    # no "manifest does not exist" failure: the user's model stays PyTorch's, and is timed so
        assert kernels == {} and "saved no kernel" in lines[0]
    score._drop_worktree(folder)
    assert not (tmp_path / "work" / "softmax" / "run").exists()


def test_reports_keeps_each_problems_verify_report_and_overhead_reaches_verify_alone(tmp_path, monkeypatch):
    problem = tmp_path / "softmax.py"
    problem.write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    commands = []

    def fake_verify(cmd, what, scoring, env, cwd=None):
        commands.append(cmd)
        workspace = cmd[cmd.index("--workspace") + 1]
        Path(workspace).mkdir(parents=True, exist_ok=True)
        data = report(eager=2.0, compiled=1.0, handed=("ours", 0.8)).to_json()
        data["route_table"] = [{"kernel": "1_softmax", "ours_us": 12.0, "pytorch_us": 9.0}]
        (Path(workspace) / "verify_report.json").write_text(json.dumps(data))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(score, "_run", fake_verify)
    run = score.ScoringRun(None, 1, ["--dtype", "float32"], True, tmp_path / "work", reports=tmp_path / "reports",
                           verify_args=["--overhead"])
    row = score.score_problem(problem, run, lambda line: None)

    assert row.correct and row.error is None and row.dropped == []
    kept = json.loads((tmp_path / "reports" / "softmax.json").read_text())
    assert kept["route_table"] == [{"kernel": "1_softmax", "ours_us": 12.0, "pytorch_us": 9.0}]
    (verify_cmd,) = commands
    assert "--overhead" in verify_cmd and "--starters" in verify_cmd and "--dtype" in verify_cmd
    limit = score.PROBLEM_TIMEOUT_S - score.VERIFY_LIMIT_MARGIN_S
    assert verify_cmd[verify_cmd.index("--time-limit") + 1] == str(limit)


def test_score_passes_reports_and_overhead_from_its_command_line(tmp_path, monkeypatch):
    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "softmax.py").write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    seen = {}

    def fake_folder(folder, **options):
        seen.update(options)
        return []

    monkeypatch.setattr(score, "score_folder", fake_folder)
    assert cli.main(["score", str(folder), "--reports", str(tmp_path / "r"), "--overhead"]) == 0
    assert seen["reports"] == tmp_path / "r" and seen["verify_args"] == ["--overhead"]
    assert cli.main(["score", str(folder)]) == 0
    assert seen["reports"] is None and seen["verify_args"] == []
    assert cli.main(["score", str(folder), "--max-autotune"]) == 0
    assert seen["verify_args"] == ["--max-autotune"]


def test_a_failed_verify_keeps_its_last_lines_in_the_row_and_in_the_reports(tmp_path, monkeypatch):
    problem = tmp_path / "softmax.py"
    problem.write_text(textwrap.dedent(SOFTMAX_PROBLEM))
    traceback = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: relu_1\n"
    monkeypatch.setattr(score, "_run", lambda cmd, what, scoring, env, cwd=None: subprocess.CompletedProcess(
        cmd, 2, "", "compiler noise\n" * 30 + traceback))
    run = score.ScoringRun(None, 1, [], True, tmp_path / "work", reports=tmp_path / "reports")
    row = score.score_problem(problem, run, lambda line: None)
    assert not row.correct and row.error == "verify exited 2: KeyError: relu_1"
    assert row.error_tail[-1] == "KeyError: relu_1" and len(row.error_tail) == score.TAIL_LINES
    kept = (tmp_path / "reports" / "softmax.error.txt").read_text()
    assert kept.startswith("verify exited 2") and "Traceback (most recent call last):" in kept


def test_the_max_autotune_column_sets_the_handed_path_against_the_strongest_pytorch_setting():
    data = report(eager=4.0, compiled=2.0, handed=("ours_compile", 1.6))
    data.variants["max_autotune"] = {"variant": "max_autotune", "ms": 1.2, "error": 0.0}
    row = score.score_report("a", data, 1.0)
    assert row.speedup_vs_compile == 1.25 and row.speedup_vs_max_autotune == pytest.approx(0.75)
    assert "| vs max-autotune |" in score.format_table([row]) and "| 0.75x |" in score.format_table([row])
    assert score.score_report("b", report(eager=4.0, compiled=2.0), 1.0).speedup_vs_max_autotune is None
    assert "max-autotune" not in score.format_table([score.score_report("b", report(eager=4.0, compiled=2.0), 1.0)])
