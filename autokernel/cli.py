"""The `autokernel` command: optimize, profile, extract, bench, verify, status and report.

Every failure a user can cause (a bad model file, a dirty git tree, a missing API key, a bad
flag) ends with one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from autokernel import paths, results
from autokernel.model_args import add_model_arguments, load_model_keywords

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")
SECONDS_PER_UNIT = {"h": 3600, "m": 60, "s": 1, "": 1}
# Subcommands that are the top-level scripts themselves, run as scripts with the arguments passed on
# (profile.py must not be imported: its name is the standard library's).
PASS_THROUGH_SCRIPTS = {"profile": paths.ROOT / "profile.py", "extract": paths.ROOT / "extract.py",
                        "bench": paths.BENCH_SCRIPT, "verify": paths.ROOT / "verify.py"}
RESUME_HINT = "  continue with: autokernel optimize --resume"


def parse_duration(text: str) -> float:
    """"8h", "30m", "90s", "1h30m", "1.5h" or plain seconds -> seconds."""
    cleaned = text.strip().lower()
    parts = DURATION_PART.findall(cleaned)
    if not cleaned or "".join(number + unit for number, unit in parts) != cleaned:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use forms like 8h, 30m, 90s or 1h30m")
    seconds = sum(float(number) * SECONDS_PER_UNIT[unit] for number, unit in parts)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be more than zero")
    return seconds


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autokernel", description="Make a PyTorch model faster overnight.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    optimize = commands.add_parser("optimize", help="profile, extract and run the keep-or-revert loop")
    add_model_arguments(optimize, with_device=False)
    optimize.add_argument("--budget", type=parse_duration, default="8h", help="time for the whole run (default 8h)")
    optimize.add_argument("--agent", choices=["auto", "anthropic", "openai", "builtin"], default="auto",
                          help="who proposes kernels (default: by which API key is set, else the built-in search)")
    optimize.add_argument("--llm-model", help="the LLM to ask (default: the agent's own default)")
    optimize.add_argument("--base-url", help="an API endpoint (an OpenAI-compatible local server, a proxy)")
    optimize.add_argument("--top", type=_positive_int, default=5, help="how many kernels to optimize (default 5)")
    optimize.add_argument("--tag", help="run name; the branch is autokernel/<tag> (default: model name and time)")
    optimize.add_argument("--resume", action="store_true", help="continue the run saved in workspace/state.json")
    optimize.add_argument("--experiment-timeout", type=parse_duration, default="15m",
                          help="time limit of one bench run (default 15m)")
    optimize.add_argument("--max-reverts", type=_positive_int, default=5,
                          help="move on after this many reverts in a row (default 5)")
    optimize.add_argument("--peak-target", type=_positive_float, default=0.9,
                          help="move on at this fraction of the hardware peak (default 0.9)")
    optimize.add_argument("--kernel-budget", type=parse_duration, default="2h",
                          help="move on after this long on one kernel (default 2h)")
    optimize.add_argument("--target-speedup", type=_positive_float, default=2.0,
                          help="move on at this speedup over the kernel's baseline (default 2.0)")
    optimize.add_argument("--noise-floor", type=_positive_float, default=0.02,
                          help="smallest relative gain that counts as faster (default 0.02)")
    optimize.add_argument("--quick", action="store_true", help="bench.py --quick (always on without a GPU)")

    for command, job in [("profile", "where a model's time goes, into workspace/"),
                         ("extract", "the plan's top kernels as jobs in workspace/"),
                         ("bench", "the judge: check and time one kernel file"),
                         ("verify", "plug the optimized kernels into the model and measure the speedup")]:
        commands.add_parser(command, add_help=False, help=f"run {command}.py: {job} (arguments go to it)")
    commands.add_parser("status", help="where the current or last run stands")
    report = commands.add_parser("report", help="results.tsv as markdown tables, one per kernel")
    report.add_argument("--results", default=str(paths.RESULTS_TSV), help="the results file (default results.tsv)")
    report.add_argument("--out", metavar="DIR",
                        help="write DIR/report.md and the DIR/progress.png plot instead of printing")
    return parser


# ---------------------------------------------------------------------- the commands
def _model_spec(args) -> dict:
    from autokernel import models

    if (args.model is None) == (args.hf is None):
        raise models.ModelLoadError("give exactly one model: a model file (like models/llama.py) or --hf NAME")
    keywords = load_model_keywords(args)
    return {"model": keywords.pop("path"), **keywords}


def _cmd_optimize(args) -> int:
    import orchestrate

    spec = {} if args.resume and args.model is None and args.hf is None else _model_spec(args)
    settings = orchestrate.LoopSettings(
        budget_s=args.budget, experiment_timeout_s=args.experiment_timeout, max_consecutive_reverts=args.max_reverts,
        peak_fraction_target=args.peak_target, kernel_time_s=args.kernel_budget, target_speedup=args.target_speedup,
        noise_floor=args.noise_floor, quick_bench=args.quick)
    agent = None if args.agent == "auto" else args.agent
    state = orchestrate.run_optimization(**spec, agent=agent, llm_model=args.llm_model, base_url=args.base_url,
                                         top=args.top, tag=args.tag, resume=args.resume, settings=settings)
    print(_state_summary(state))
    return 0


def _run_script(command: str, extra: list[str]) -> int:
    script = PASS_THROUGH_SCRIPTS[command]
    if not script.exists():
        print(f"autokernel: {command} is not available in this checkout ({script.name} is missing)", file=sys.stderr)
        return EXIT_ERROR
    # The user's own command on the user's own files: it runs in the foreground from the user's
    # directory (so relative paths mean what they say), output live.
    return subprocess.call([sys.executable, str(script), *extra])


def _state_summary(state) -> str:
    lines = [f"run {state.tag} (branch autokernel/{state.tag}): "
             f"{'finished' if state.done else f'job {state.job_index + 1} of {len(state.jobs)}'}, "
             f"{state.experiment} experiments numbered, {state.elapsed_s / 3600:.2f} h of "
             f"{state.budget_s / 3600:.2f} h used, {state.llm_tokens} LLM tokens (${state.cost_usd:.2f})"]
    for entry in state.finished:
        vs_pytorch = entry.get("best_speedup_vs_pytorch")
        lines.append(f"  {entry['file']}: {entry['speedup_over_baseline']:.2f}x over its baseline"
                     + (f", {vs_pytorch:.2f}x vs PyTorch" if vs_pytorch is not None else "")
                     + f" ({entry['experiments']} experiments; {entry['stopped_because']})")
    if state.current is not None:
        job = state.jobs[state.job_index]
        gain = state.current.gain()
        lines.append(f"  now: rank {job['rank']} {job['kernel_type']}, {state.current.experiments} experiments"
                     + (f", best {gain:.2f}x over its baseline" if gain else ""))
    if not state.done:
        lines.append(RESUME_HINT)
    return "\n".join(lines)


def _resumable() -> bool:
    import orchestrate

    try:
        return not orchestrate.RunState.load().done
    except orchestrate.OptimizationError:
        return False


def _cmd_status(args) -> int:
    import orchestrate

    if not orchestrate.STATE_FILE.exists():
        print(f"no run yet ({orchestrate.STATE_FILE} does not exist); start one with: autokernel optimize MODEL")
        return 0
    state = orchestrate.RunState.load()
    print(_state_summary(state))
    rows = [row for row in results.read_rows(paths.RESULTS_TSV) if row["tag"] == state.tag]
    kept = sum(row["status"] == results.STATUS_KEEP for row in rows)
    print(f"results.tsv: {len(rows)} rows for this run, {kept} kept")
    return 0


def _cmd_report(args) -> int:
    if args.out:
        from autokernel import report

        markdown_path, plot_path = report.write_report(args.results, args.out)
        print(f"report written to {markdown_path} and {plot_path}")
    else:
        print(results.markdown_summary(results.read_rows(args.results)))
    return 0


def _user_errors() -> tuple[type[Exception], ...]:
    """The exceptions whose message is meant for the user; imported late so `autokernel report` stays light."""
    import extract
    import orchestrate
    from autokernel import gitops, models, report
    from autokernel.agents.base import AgentError

    return (orchestrate.OptimizationError, gitops.GitOpsError, models.ModelLoadError, AgentError, extract.PlanError,
            results.ResultsFileError, report.ReportError)


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command in PASS_THROUGH_SCRIPTS:
        return _run_script(args.command, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handlers = {"optimize": _cmd_optimize, "status": _cmd_status, "report": _cmd_report}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("\nautokernel: interrupted", file=sys.stderr)
        if args.command == "optimize" and _resumable():
            print(f"the tree is at the last kept commit and the state is saved; {RESUME_HINT.strip()}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _user_errors() as exc:
        print(f"autokernel: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
