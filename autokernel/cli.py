"""The `autokernel` command: optimize, profile, extract, bench, verify, status and report.

Every failure a user can cause (a bad model file, a dirty git tree, a missing API key, a bad
flag) ends with one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from autokernel.core import contracts, paths
from autokernel.core.arguments import joined_negative_values, parse_duration, positive_float, positive_int
from autokernel.core.errors import OptimizationError
from autokernel.profile.model_args import add_model_arguments, load_model_keywords, model_flags
from autokernel.search import results

EXIT_ERROR = 1
EXIT_INTERRUPTED = 128 + signal.SIGINT
# Subcommands that are the layout's doors' commands, each a process of its own with the arguments passed on
# (profile.py, bench.py, extract.py, verify.py run the same modules).
PASS_THROUGH_MODULES = {"profile": "autokernel.profile.profile_command",
                        "extract": "autokernel.profile.extract_command",
                        "bench": "autokernel.judge.bench", "verify": "autokernel.verify.verify_command"}
RESUME_HINT = "  continue with: autokernel optimize --resume"


def _workdir_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--workdir", metavar="DIR",
                        help="the folder for the run's files (kernel.py, workspace/, optimized_kernels/, results.tsv); "
                             "default: the git repository you are in")
    return parser


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autokernel", description="Make a PyTorch model faster overnight.",
                                     parents=[_workdir_parser()])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    optimize = commands.add_parser("optimize", help="profile, extract and run the keep-or-revert loop")
    add_model_arguments(optimize, with_device=False)
    # Run settings default to None here, so --resume can tell a flag given from a default (RunSettings holds those).
    optimize.add_argument("--budget", type=parse_duration, help="time for the whole run, profiling included (default 8h)")
    optimize.add_argument("--agent", choices=contracts.AGENT_KINDS,
                          help="who proposes kernels (default: by which API key is set, else the built-in search)")
    optimize.add_argument("--llm-model", help="the LLM to ask (default: the agent's own default)")
    optimize.add_argument("--base-url", help="an API endpoint (an OpenAI-compatible local server, a proxy)")
    optimize.add_argument("--reasoning", choices=["low", "medium", "high"],
                          help="the LLM's reasoning effort (Claude's thinking, OpenAI's reasoning_effort), for models "
                               "that take one (default: the model's own)")
    optimize.add_argument("--max-cost", type=positive_float, metavar="DOLLARS",
                          help="stop cleanly once the estimated LLM cost reaches this (default: no cap)")
    optimize.add_argument("--top", type=positive_int, default=5, help="how many kernels to optimize (default 5)")
    optimize.add_argument("--backend", choices=paths.BACKENDS, default="triton",
                          help="the kernels' language: triton (default), cuda (CUDA C++ starters, kernels/cuda/), "
                               "or any (Triton starters; the agent may switch to CUDA C++)")
    optimize.add_argument("--tag", help="run name; the branch is autokernel/<tag> (default: model name and time)")
    which_run = optimize.add_mutually_exclusive_group()
    which_run.add_argument("--resume", action="store_true",
                           help="continue the run saved in workspace/state.json, with its settings (flags given "
                                "with --resume override them)")
    which_run.add_argument("--new", action="store_true",
                           help="start a new run even though workspace/state.json holds an unfinished one: that "
                                "run's branch and results stay, and its state moves to workspace/state.<tag>.json")
    optimize.add_argument("--experiment-timeout", type=parse_duration,
                          help="the longest one bench run may take (default 15m; the loop sets a tighter limit "
                               "from the measured duration of the job's benches)")
    optimize.add_argument("--max-reverts", type=positive_int,
                          help="move on after this many reverts in a row (default 5)")
    optimize.add_argument("--max-malformed", type=positive_int,
                          help="move on after this many unreadable LLM replies in a row, each asked again once "
                               "(default 3; they do not count as reverts)")
    optimize.add_argument("--peak-target", type=positive_float,
                          help="move on at this fraction of the hardware peak (default 0.9)")
    optimize.add_argument("--kernel-budget", type=parse_duration, help="move on after this long on one kernel (default 2h)")
    optimize.add_argument("--target-speedup", type=positive_float,
                          help="move on at this speedup over the kernel's baseline (default 2.0)")
    optimize.add_argument("--noise-floor", type=positive_float,
                          help="smallest relative gain that counts as faster (default 0.02)")
    optimize.add_argument("--quick", action="store_true", default=None,
                          help="bench.py --quick (always on without a GPU)")
    optimize.add_argument("--gpus", type=positive_int,
                          help="judge workers, one per GPU, each judging one candidate at a time (default: every "
                               "visible GPU; without a GPU, N logical GPUs in Triton's interpreter)")
    optimize.add_argument("--ray", metavar="auto|ADDRESS",
                          help="run the judge workers on a Ray cluster, one per GPU (needs pip install "
                               "'autokernel[ray]')")

    for command, job in [("profile", "where a model's time goes, into workspace/"),
                         ("extract", "the plan's top kernels as jobs in workspace/"),
                         ("bench", "the judge: check and time one kernel file"),
                         ("verify", "plug the optimized kernels into the model and measure the speedup")]:
        commands.add_parser(command, add_help=False, help=f"run {command}.py: {job} (arguments go to it)")
    score = commands.add_parser("score", help="fast_p of a folder of KernelBench-style problem files")
    score.add_argument("folder", help="a folder of problem files (class Model, get_inputs, get_init_inputs)")
    score.add_argument("--budget-per-problem", metavar="DURATION",
                       help="run the loop on each problem for this long (like 5m); default: the starter kernels")
    score.add_argument("--top", type=positive_int, default=1, help="kernels to optimize per problem (default 1)")
    score.add_argument("--dtype", help="float16, bfloat16 or float32 (default: as each file builds it)")
    score.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants (slow on CPU)")
    score.add_argument("--json-out", metavar="FILE", help="also write the scores and the summary as JSON")
    score.add_argument("--state", metavar="FILE",
                       help="append each problem's score to FILE and skip the problems it holds: run the same command "
                            "again to go on after a cut-off run")
    score.add_argument("--gpus", type=positive_int, default=1, help="problems scored side by side, one per GPU")
    score.add_argument("--jobs", type=positive_int, default=1,
                       help="problems side by side on each GPU, their compilations overlapping and their timings "
                            "taking turns (default 1)")
    score.add_argument("--problems", metavar="NAMES", help="only these problem files, by name: gelu,l2_norm,...")
    score.add_argument("--stop-after", metavar="DURATION", type=parse_duration,
                       help="start no problem after this long (with --state, the next run goes on)")
    score.add_argument("--reports", metavar="DIR",
                       help="keep each problem's verify report (route table, every variant's timings) as "
                            "DIR/<problem>.json")
    score.add_argument("--overhead", action="store_true",
                       help="verify measures the routing's own cost too (verify.py --overhead)")
    score.add_argument("--max-autotune", action="store_true",
                       help='a column against torch.compile(mode="max-autotune") too, the strongest PyTorch setting '
                            "(verify.py --max-autotune; a GPU, minutes of autotuning per problem)")
    score.add_argument("--problem-timeout", metavar="DURATION", type=parse_duration,
                       help="the most one step of one problem may take (default 15m)")
    status = commands.add_parser("status", help="where the current or last run stands")
    status.add_argument("--json", action="store_true", help="the state and a summary as JSON, for scripts")
    report = commands.add_parser("report", help="results.tsv as markdown tables, one per kernel")
    report.add_argument("--results", default=str(paths.RESULTS_TSV), help="the results file (default results.tsv)")
    report.add_argument("--verify-report", default=str(paths.WORKSPACE / "verify_report.json"),
                        help="verify.py's report, whose end-to-end verdict leads report.md when it exists")
    output = report.add_mutually_exclusive_group()
    output.add_argument("--out", metavar="DIR",
                        help="write DIR/report.md and the DIR/progress.png plot instead of printing")
    output.add_argument("--json", action="store_true", help="a per-kernel summary as JSON, for scripts")
    return parser


# ---------------------------------------------------------------------- the commands
def _line_at_once(line: str) -> None:
    """One write per line: problems scored side by side log from threads, and print's two writes can interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _cmd_score(args, started: float) -> int:
    from pathlib import Path

    from autokernel import score

    folder = Path(args.folder)
    if not folder.is_dir() or not score.problem_files(folder):
        _say(f"autokernel: error: {folder} is not a folder of problem files (a class Model and get_inputs each)")
        return EXIT_ERROR
    if args.budget_per_problem:
        parse_duration(args.budget_per_problem)      # a bad duration fails now, not in every child
    extra = ["--dtype", args.dtype] if args.dtype else []
    try:
        scores = score.score_folder(folder, budget=args.budget_per_problem, top=args.top, extra_args=extra,
                                    compile_enabled=not args.no_compile, log=_line_at_once,
                                    state=Path(args.state) if args.state else None, gpus=args.gpus, jobs=args.jobs,
                                    only=args.problems.split(",") if args.problems else None,
                                    stop_after_s=args.stop_after,
                                    problem_timeout_s=args.problem_timeout or score.PROBLEM_TIMEOUT_S,
                                    reports=Path(args.reports) if args.reports else None,
                                    verify_args=["--overhead"] * args.overhead + ["--max-autotune"] * args.max_autotune)
    except ValueError as error:
        _say(f"autokernel: error: {error}")
        return EXIT_ERROR
    print(score.format_table(scores))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"scores": [s.to_json() for s in scores],
                                                   "summary": score.summary(scores)}, indent=2) + "\n")
    return 0



def _model_spec(args) -> dict:
    """The model the flags name, the file checked now: the command's own errors come before any about the repository."""
    from autokernel.profile import models

    if (args.model is None) == (args.hf is None):
        raise models.ModelLoadError("give exactly one model: a model file (like models/llama.py) or --hf NAME")
    keywords = load_model_keywords(args)
    if keywords["path"] is not None:
        models.check_model_file(Path(keywords["path"]))
    return {"model": keywords.pop("path"), **keywords}


# The optimize flags that are run settings: argparse dest -> RunSettings field.
SETTING_FLAGS = {"budget": "budget_s", "experiment_timeout": "experiment_timeout_s",
                 "max_reverts": "max_consecutive_reverts", "peak_target": "peak_fraction_target",
                 "kernel_budget": "kernel_time_s", "target_speedup": "target_speedup", "noise_floor": "noise_floor",
                 "quick": "quick_bench", "max_cost": "max_cost_usd", "agent": "agent", "llm_model": "llm_model",
                 "base_url": "base_url", "gpus": "gpus", "ray": "ray", "reasoning": "reasoning",
                 "max_malformed": "max_malformed"}


def _cmd_optimize(args, started: float) -> int:
    from autokernel.core import interpreter
    from autokernel.core.contracts import RunSettings
    from autokernel.profile import planning
    from autokernel.search import session

    interpreter.choose()        # first: no GPU means Triton's interpreter (bench.py's worker chooses for itself)

    given = {field: getattr(args, flag) for flag, field in SETTING_FLAGS.items() if getattr(args, flag) is not None}
    if args.resume:
        if args.model is not None or args.hf is not None:
            raise OptimizationError("--resume continues the saved run, whose jobs are in its state: "
                                            "give no model with it")
    else:
        spec = _model_spec(args)
    problem = paths.outside_any_repository()
    if problem:
        raise OptimizationError(problem)
    if args.resume:
        state = session.run_optimization(resume=True, overrides=given, tag=args.tag, started=started)
    else:
        name = spec["model"] or (f"hf-{spec['hf']}" if spec.get("hf") else None)
        args.tag = args.tag or session.default_tag(name)
        state = session.run_optimization(plan=planning.model_file_planner(**spec, top=args.top, backend=args.backend),
                                         settings=RunSettings(**given), tag=args.tag, started=started,
                                         new=args.new, model_flags=model_flags(args))
    print("\n".join(session.outcome_lines(state)))
    return 0


def _run_command(command: str, extra: list[str]) -> int:
    # The user's own command on the user's own files: it runs in the foreground from the user's
    # directory (so relative paths mean what they say), output live.
    return subprocess.call(paths.module_command(PASS_THROUGH_MODULES[command], *extra),
                           env={**paths.module_environment(), paths.COMMAND_VARIABLE: f"autokernel {command}"})


def _resumable(args) -> bool:
    """Whether the run this command started or resumed is saved for --resume (a new run's checks that failed
    leave another run's state in place: that one is not this command's to hint at)."""
    from autokernel.search.run_state import resumable

    try:
        state = resumable()
    except Exception:       # the hint is a courtesy; it must not hide the error being reported
        return False
    return state is not None and (args.resume or state.tag == args.tag)


def _cmd_status(args, started: float) -> int:
    from autokernel.core.live import plural
    from autokernel.search import run_state, session
    from autokernel.search.run_state import state_file

    if not state_file().exists():
        if args.json:
            print(json.dumps({"state": None, "results": None, "outcome": []}))
        else:
            print(f"no run yet ({state_file()} does not exist); start one with: autokernel optimize MODEL")
        return 0
    state = run_state.load()
    rows = [row for row in results.read_rows(paths.RESULTS_TSV) if row["tag"] == state.tag]
    kept = sum(row["status"] == contracts.STATUS_KEEP for row in rows)
    if args.json:
        print(json.dumps({"state": state.to_json(), "results": {"rows": len(rows), "kept": kept},
                          "outcome": session.outcome_lines(state)}, indent=2))
        return 0
    print("\n".join(session.outcome_lines(state)))
    print(f"results.tsv: {plural(len(rows), 'row')} for this run, {kept} kept")
    return 0


def _cmd_report(args, started: float) -> int:
    from autokernel.reports import report

    if not Path(args.results).exists():
        raise results.ResultsFileError(f"no results file at {args.results}: run `autokernel optimize` first, "
                                       f"or name the file with --results")
    rows = results.read_rows(args.results)
    state = _rows_run(rows)
    throughput = state.throughput if state else None
    titles = {job.kernel_type: job.title for job in state.jobs} if state else None    # a region's ops
    if args.json:
        print(json.dumps(report.summary_json(rows, report.read_verdict(args.verify_report), throughput), indent=2))
    elif args.out:
        written = report.write_report(args.results, args.out, verify_report=args.verify_report, throughput=throughput,
                                      plan_caveats=state.plan_caveats if state else [],
                                      titles=titles)
        if written.plot is None:
            print(f"report written to {written.markdown}")
            _say(f"autokernel: warning: {written.plot_problem}")
        else:
            print(f"report written to {written.markdown} and {written.plot}")
    else:
        print(results.markdown_summary(rows, titles))
    return 0


def _rows_run(rows: list[dict]):
    """The saved run (state.json: its pace, its plan's caveats), when it is the one these rows are from; else None."""
    from autokernel.search import run_state

    try:
        state = run_state.load()
    except run_state.StateError:
        return None
    return state if any(row["tag"] == state.tag for row in rows) else None


def _user_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is meant for the user; imported late so `autokernel report` stays light."""
    from autokernel.agents.base import AgentError
    from autokernel.core import lock
    from autokernel.core.plan import PlanError
    from autokernel.judge import runner
    from autokernel.profile import models
    from autokernel.reports import report
    from autokernel.search import gitops

    return (OptimizationError, gitops.GitOpsError, models.ModelLoadError, AgentError, PlanError,
            results.ResultsFileError, report.ReportError, lock.RunLocked, runner.SandboxError)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()       # the run's budget counts from here
    # --workdir first, anywhere on the line: every default below (results.tsv, workspace/) is in it.
    where, argv = _workdir_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    if where.workdir is not None:
        if not Path(where.workdir).is_dir():
            _say(f"autokernel: error: --workdir {where.workdir} is not a folder")
            return EXIT_ERROR
        paths.use_workdir(where.workdir)
    parser = _build_parser()
    args, extra = parser.parse_known_args(joined_negative_values(argv, parser))
    if args.command in PASS_THROUGH_MODULES:
        return _run_command(args.command, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handlers = {"optimize": _cmd_optimize, "status": _cmd_status, "report": _cmd_report, "score": _cmd_score}
    try:
        return handlers[args.command](args, started)
    except BrokenPipeError:
        # `autokernel status | head`: the reader has what it wanted; say nothing more on a closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        _say(f"\nautokernel: interrupted ({signal.Signals(signum).name})")
        if args.command == "optimize" and _resumable(args):
            _say(f"the tree is at the last kept commit and the state is saved; {RESUME_HINT.strip()}")
        return 128 + signum
    except _user_errors() as exc:
        _say(f"autokernel: error: {exc}")
        if args.command == "optimize" and _resumable(args) and type(exc).__name__ != "RunLocked":
            _say(RESUME_HINT.strip())
        return EXIT_ERROR


def _say(line: str) -> None:
    """One line on stderr; a terminal that is gone (SIGHUP) is no reason to crash on the way out."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
