"""Starting or resuming a run: every check before anything is written, then the loop, then the user back home.

A new run, in this order, creates nothing until every check has passed (the command checked its own
arguments, the model file among them, before):
  1. a git repository to work in, then the lock (one run per repository);
  2. a valid tag, no unfinished run in workspace/state.json (`new` sets one aside, once every check
     passed: its branch and rows stay), and the repository: no uncommitted tracked changes, commits
     to branch from, the run's branch is new, no untracked files in optimized_kernels/ (the run
     commits that folder), a results.tsv this version can append to;
  3. the agent, with one cheap call to its endpoint (a wrong URL, key or model fails in seconds);
  4. then the plan (load and profile the model, extract the jobs), the branch, the state, the loop.
Resume restores the run's settings from its state (a flag given with --resume overrides its
setting, and says so), finishes whatever write a kill interrupted (`_recover`), and refuses rather
than drop a commit a user made on the run's branch. Either way the user ends up back on the branch
(or detached commit) they started from, told where the results are.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable

import torch

from autokernel.agents.base import AgentError
from autokernel.agents.factory import make_agent
from autokernel.core import paths
from autokernel.core.contracts import NO_GAIN, SPEED_UNKNOWN, Job, RunSettings
from autokernel.core.paths import OPTIMIZED_DIR_NAME
from autokernel.core.plan import Plan
from autokernel.core.run_records import BASELINES, EXPERIMENTS, PROFILING, RunState
from autokernel.profile.model_args import shown_flags
from autokernel.profile.regions import autotune_budget
from autokernel.profile.regions.autotune_budget import AUTOTUNE_SHARE, AutotuneAllowance
from autokernel.core.errors import OptimizationError
from autokernel.core.live import TORCH_LOG, ProgressView, format_duration, format_speedup, plural, torch_chatter_to
from autokernel.core.lock import RunLock
from autokernel.fleet import workers
from autokernel.judge import runner
from autokernel.sandbox.child_env import secrets_withheld
from autokernel.search import gitops, policy, results, run_state, sandbox_checks
from autokernel.search.budget import CLOCK_FILE_NAME, Budget, ClockKeeper, recovered_elapsed
from autokernel.search.loop import OptimizationRun
from autokernel.search.loop_records import is_run_stop
from autokernel.search.parallel_loop import ParallelRun
from autokernel.search.run_state import resumable, state_file

TAG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CPU_NOTE = ("no CUDA GPU: bench.py runs the kernels on CPU through the Triton interpreter (with --quick), so "
            "correctness is checked for real but timings, and the keep decisions made from them, are not meaningful")
LOOP_WRITES = (gitops.KERNEL_FILE_NAME, OPTIMIZED_DIR_NAME)


def cuda_build_note() -> str | None:
    """On a machine without a usable GPU, a CUDA build of torch: say that the CPU build does the same, far smaller."""
    if torch.version.cuda is None or torch.cuda.is_available():
        return None
    release = torch.__version__.split("+")[0]
    return (f"torch {torch.__version__} is a CUDA build (CUDA {torch.version.cuda}), and this machine has no GPU it "
            f"can use: its CUDA libraries go unused. The CPU build runs the same, gigabytes smaller: pip install "
            f"torch=={release} --index-url https://download.pytorch.org/whl/cpu")


def default_tag(name: str | None) -> str:
    stem = Path(name).stem if name else "run"
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")


def run_optimization(*, plan: Callable[[Callable[[str], None]], list[Job]] | None = None,
                     settings: RunSettings | None = None, overrides: dict | None = None, tag: str | None = None,
                     resume: bool = False, view: ProgressView | None = None, stay_on_run_branch: bool = False,
                     checkpoint: Callable[[str], None] | None = None, started: float | None = None,
                     new: bool = False, model_flags: list[str] | None = None) -> RunState:
    """Start a run (plan(log) gives its jobs, after every check) or resume the saved one; returns the final state.

    settings: a new run's settings. overrides: the settings given explicitly, which on resume replace
    the saved ones. started: time.monotonic() when the command started (its time counts).
    stay_on_run_branch: after a run that ends normally, leave the run's branch checked out (the Python
    API plugs its kernels in from there); an interrupted or failed run always returns the user.
    new: start even though an unfinished run is saved: once every check passed, its state is set aside.
    model_flags: the flags that name the model (profile.model_args.model_flags), recorded in the state with the
    inputs profiled, so that `autokernel verify` with no model checks this one.
    Raises OptimizationError, GitOpsError, AgentError, ResultsFileError, RunLocked or ModelLoadError
    with a message for the user, and Interrupted (a KeyboardInterrupt) on a signal; the state is
    saved for --resume either way.
    """
    started = time.monotonic() if started is None else started
    view = view or ProgressView()
    repo = gitops.KernelRepo(paths.ROOT)       # before the lock: outside a repository, nothing is made
    # torch's warnings and logging (Inductor's autotuning errors, their tracebacks) go to the workspace's log, not
    # the terminal, whose lines are the run's own; the file is made only if torch says something, after the lock.
    with RunLock(), view, torch_chatter_to(paths.WORKSPACE / TORCH_LOG):
        problem = sandbox_checks.sandbox_gpu_problem(paths.ROOT)     # before profiling: minutes, wasted if this fails
        if problem:
            raise OptimizationError(problem)
        if resume:
            state, agent, position = _prepare_resume(repo, tag, overrides or {}, view)
        else:
            workers.check(settings or RunSettings())        # the workers asked for can be had, before anything is made
            state, agent, position = _prepare_new(repo, plan, settings or RunSettings(), tag, view, new, model_flags,
                                                  started)
        if not torch.cuda.is_available():
            view.log(CPU_NOTE)
            if note := cuda_build_note():
                view.log(note)
        if not runner.filesystem_confined():
            view.log(sandbox_checks.unconfined_note())
        for missing in sandbox_checks.missing_protections(paths.ROOT):
            view.log(f"the sandbox cannot give the candidates a {missing}")
        clock_file = paths.WORKSPACE / CLOCK_FILE_NAME
        state.elapsed_s = recovered_elapsed(clock_file, state.tag, state.elapsed_s)    # what a kill -9 left unsaved
        budget = Budget(state.settings.budget_s, used_before_s=state.elapsed_s, started=started)
        try:
            # The agent holds its key now: from here on no process of the run (the pool's workers, git, the
            # judge's children) can inherit a secret from this environment, whatever its allow-list says.
            with secrets_withheld(), ClockKeeper(clock_file, state.tag, budget), \
                    workers.open_pool(state.settings, view) as pool:
                loop = (OptimizationRun(state, repo=repo, agent=agent, view=view, budget=budget, checkpoint=checkpoint)
                        if pool is None else ParallelRun(state, pool=pool, repo=repo, agent=agent, view=view,
                                                         budget=budget, checkpoint=checkpoint))
                state = loop.run()
        except BaseException:
            _return_user(repo, state, position, view)
            raise
        _return_user(repo, state, None if stay_on_run_branch else position, view)
        return state


# ---------------------------------------------------------------------- a new run
def _prepare_new(repo: gitops.KernelRepo, plan, settings: RunSettings, tag: str | None, view: ProgressView,
                 new: bool, model_flags: list[str] | None, started: float) -> tuple[RunState, object, str]:
    tag = tag or default_tag(None)
    if not TAG_PATTERN.match(tag):
        raise OptimizationError(f"bad tag {tag!r}: use letters, digits, '.', '_' and '-'")
    unfinished = resumable()
    if unfinished is not None and not new:
        raise OptimizationError(f"{state_file()} holds run {unfinished.tag!r}, unfinished: pass --resume to continue "
                                f"it, or --new to start a new run (its branch {gitops.branch_name(unfinished.tag)} "
                                f"and its rows in {paths.RESULTS_TSV.name} stay)")
    repo.ensure_clean()
    repo.ensure_new_branch(tag)
    _refuse_untracked_outputs(repo)
    results.check_writable(paths.RESULTS_TSV)
    agent, settings = _make_agent(settings, view)
    if plan is None:
        raise OptimizationError("nothing to optimize: give a model")
    view.phase("profiling")
    planning_began = time.monotonic()
    # The starters' autotuning is the run's time too: it gets a share of the budget, counted from the run's start.
    allowance = AutotuneAllowance(deadline=started + settings.budget_s * AUTOTUNE_SHARE)
    with autotune_budget.bounded(allowance):
        jobs = plan(view.log)
    note = autotune_budget.skipped_note(allowance, settings.budget_s)
    if note:
        view.log(note)
    finished = time.monotonic()
    view.log(f"profiling and the starters took {format_duration(finished - planning_began)}; "
             f"{format_duration(started + settings.budget_s - finished)} of the {settings.show('budget_s')} budget left")
    position = repo.current_position()
    if unfinished is not None:
        aside = run_state.set_aside(unfinished)
        view.log(f"run {unfinished.tag} stays unfinished on branch {gitops.branch_name(unfinished.tag)}; its state "
                 f"is now {aside} (move it back to {state_file().name} to resume that run)")
    repo.start_branch(tag)
    state = RunState(tag=tag, jobs=jobs, kept_commit=repo.head(), settings=settings, return_to=position,
                     experiment=results.last_experiment(paths.RESULTS_TSV),
                     model=None if model_flags is None else {"flags": model_flags, "inputs": _profiled("inputs")},
                     plan_caveats=_profiled("caveats") or [],
                     spent_s={PROFILING: round(finished - planning_began, 2)})
    run_state.save(state)
    view.log(f"run {tag} on branch {gitops.branch_name(tag)}: {settings.describe()}")
    return state, agent, position


def _profiled(name: str):
    """What the plan just profiled records of the inputs (their shapes and dtypes) or its caveats, if it does."""
    from autokernel.profile.profiler import PLAN_FILE

    try:
        return getattr(Plan.from_json(json.loads((paths.WORKSPACE / PLAN_FILE).read_text())), name)
    except (OSError, ValueError, TypeError, KeyError):    # no plan file (jobs given as such), or another version's
        return None


def _refuse_untracked_outputs(repo: gitops.KernelRepo) -> None:
    stray = repo.untracked_files(OPTIMIZED_DIR_NAME)
    if stray:
        raise OptimizationError(f"{OPTIMIZED_DIR_NAME}/ has files git does not track ({', '.join(stray[:5])}): "
                                f"the run commits that folder, so move them away or commit them first")


def _make_agent(settings: RunSettings, view: ProgressView):
    """The agent the settings name, its endpoint checked; the settings with what it resolved to."""
    agent = make_agent(None if settings.agent == "auto" else settings.agent, model=settings.llm_model,
                       base_url=settings.base_url, reasoning=settings.reasoning)
    resolved, _ = settings.overridden({"agent": agent.kind, "llm_model": agent.model or settings.llm_model,
                                       "base_url": settings.base_url})
    if resolved.max_cost_usd is not None and not agent.has_prices():
        raise AgentError(f"--max-cost needs a model whose prices AutoKernel knows, and {agent.model!r} is not one; "
                         f"run without --max-cost, or pick a listed model")
    view.phase(f"checking {agent.name}" + (f" at {agent.base_url}" if agent.base_url else ""))
    warning = agent.check_endpoint()
    if warning:
        view.log(warning)
    return agent, resolved


# ---------------------------------------------------------------------- resuming
def _prepare_resume(repo: gitops.KernelRepo, tag: str | None, overrides: dict,
                    view: ProgressView) -> tuple[RunState, object, str]:
    state = run_state.load()
    if tag and tag != state.tag:
        raise OptimizationError(f"{state_file()} holds run {state.tag!r}, not {tag!r}")
    if state.done:
        raise OptimizationError(f"run {state.tag!r} already finished; start a new one without --resume")
    settings, notes = state.settings.overridden(overrides)
    if "agent" in overrides and overrides["agent"] != state.settings.agent:
        # The old agent's model, endpoint and reasoning level mean nothing to the new one, unless given again now.
        dropped = {name: None for name in ("llm_model", "base_url", "reasoning")
                   if name not in overrides and getattr(settings, name)}
        settings, _ = settings.overridden(dropped)
        notes += [f"{RunSettings.FLAGS[name]} {getattr(state.settings, name)} was the run's {state.settings.agent} "
                  f"agent's: dropped for --agent {overrides['agent']}" for name in dropped]
    results.check_writable(paths.RESULTS_TSV)
    if not repo.has_branch(state.tag):
        raise OptimizationError(f"branch {gitops.branch_name(state.tag)} does not exist, so run {state.tag!r} cannot "
                                f"be resumed; move {state_file()} aside to start a new run")
    position = repo.current_position()
    on_run_branch = repo.current_branch() == gitops.branch_name(state.tag)
    _check_tree(repo, state, on_run_branch)
    agent, settings = _make_agent(settings, view)
    if state.agent_state is not None:
        agent.load_state(state.agent_state)       # the built-in search: what it tried is not tried again
    state.settings = settings
    if not on_run_branch:
        repo.checkout_branch(state.tag)
    _recover(repo, state)
    # A kill leaves the user on the run's branch: then home is where the run started from.
    state.return_to = state.return_to if on_run_branch else position
    run_state.save(state)
    view.log(f"resuming run {state.tag} at experiment {state.experiment + 1}, job {state.job_index + 1} of "
             f"{len(state.jobs)}, {format_duration(state.elapsed_s)} of {settings.show('budget_s')} used")
    view.log(f"settings: {settings.describe()}")
    for note in notes:
        view.log(note)
    return state, agent, state.return_to or position


def _check_tree(repo: gitops.KernelRepo, state: RunState, on_run_branch: bool) -> None:
    """Uncommitted changes are the user's unless a kill left the loop's own, mid-step, on the run's branch."""
    changed = repo.uncommitted_tracked_files()
    mid_step = on_run_branch and (state.in_flight or state.pending_row
                                  or any(progress.finishing for _, progress in run_state.open_jobs(state)))
    theirs = [name for name in changed if not (mid_step and name.split("/")[0] in LOOP_WRITES)]
    if theirs:
        raise gitops.GitOpsError(f"tracked files have uncommitted changes ({', '.join(theirs[:10])}); commit or "
                                 f"stash them first: the loop resets the tree after every rejected experiment")
    if not mid_step:
        _refuse_untracked_outputs(repo)


def _recover(repo: gitops.KernelRepo, state: RunState) -> None:
    """Bring the run's branch back to its last kept commit, finishing or undoing what a kill interrupted."""
    kept = state.kept_commit
    if not repo.is_ancestor(kept, "HEAD"):
        raise OptimizationError(f"branch {gitops.branch_name(state.tag)} no longer holds the run's last kept commit "
                                f"{kept[:12]}; put it back (git reset --hard {kept[:12]} on that branch) to resume")
    foreign = [c for c in repo.commits_after(kept) if c.run_tag != state.tag]
    if foreign:
        listing = "; ".join(f"{c.sha[:12]} {c.subject}" for c in foreign[:5])
        raise OptimizationError(f"branch {gitops.branch_name(state.tag)} has {len(foreign)} commit(s) after the run's "
                                f"last kept one that AutoKernel did not make ({listing}); resuming would drop them. "
                                f"Move them to a branch of your own (git branch mine {gitops.branch_name(state.tag)}; "
                                f"git reset --hard {kept[:12]} on the run's branch), then --resume")
    run_state.settle_pending_row(state)
    state.experiment = max(state.experiment, results.last_experiment(paths.RESULTS_TSV))
    repo.reset_hard(kept)
    for name in repo.untracked_files(OPTIMIZED_DIR_NAME):    # a finish step's file, never committed
        (repo.root / name).unlink(missing_ok=True)
    state.in_flight = None


# ---------------------------------------------------------------------- the end
def _return_user(repo: gitops.KernelRepo, state: RunState, position: str | None, view: ProgressView) -> None:
    branch = gitops.branch_name(state.tag)
    try:
        if position and position != branch and repo.current_branch() == branch:
            dirty = repo.uncommitted_tracked_files()
            if dirty:
                view.log(f"staying on {branch}: {', '.join(dirty[:5])} changed, and a checkout would carry them")
            else:
                repo.checkout(position)
    except gitops.GitOpsError as exc:
        view.log(f"could not return to {position}: {exc}")
    saved = [entry["file"] for entry in state.finished if entry.get("saved", entry.get("verdict") != NO_GAIN)]
    if is_run_stop(state.stopped_because):
        saved += [f"{state.jobs[index].name}.py (best so far)" for index, progress in run_state.open_jobs(state)
                  if policy.is_saved(progress.best)]
    where = "on this branch" if repo.current_branch() == branch else f"on branch {branch}"
    kept = f"results: every experiment in {paths.RESULTS_TSV.name}, the kept ones as commits {where} (git log {branch})"
    if not saved:
        view.log(f"{kept}; no optimized kernel was saved, so {OPTIMIZED_DIR_NAME}/ holds none of this run's")
        return
    view.log(f"{kept}, the optimized kernels in {OPTIMIZED_DIR_NAME}/ {where}"
             + ("" if repo.current_branch() == branch else
                f": `git checkout {branch}` (or `git checkout {branch} -- {OPTIMIZED_DIR_NAME}`) before "
                f"`autokernel verify`") + f"; kernels saved: {', '.join(saved)}")


# ---------------------------------------------------------------------- the outcome, in words
RESUME_HINT = "continue with: autokernel optimize --resume"


def _rows_words(tag: str) -> str:
    """The run's rows as the report counts them ("3 experiments and 1 baseline, "), from results.tsv: the state's
    experiment number counts every earlier run's rows in that file too (a run that had judged nothing said "4
    experiments numbered"); nothing when the file cannot be read."""
    try:
        rows = [row for row in results.read_rows(paths.RESULTS_TSV) if row["tag"] == tag]
    except (OSError, results.ResultsFileError):
        return ""
    experiments = results.experiments_of(rows)
    return f"{plural(experiments, 'experiment')} and {plural(len(rows) - experiments, 'baseline')}, "


def outcome_lines(state: RunState) -> list[str]:
    """The run and each of its kernels, as they really ended: done, cut short (and why), skipped or not started."""
    settings = state.settings
    where = ("finished" if state.done else f"stopped: {state.stopped_because}" if state.stopped_because
             else f"job {state.job_index + 1} of {len(state.jobs)}")
    cost = f"${state.cost_usd:.2f}" + (f" + {plural(state.cost_unknown_calls, 'call')} without a price"
                                       if state.cost_unknown_calls else "")
    lines = [f"run {state.tag} (branch {gitops.branch_name(state.tag)}): {where}; {_rows_words(state.tag)}"
             f"{format_duration(state.elapsed_s)} of {settings.show('budget_s')} used{_spent_words(state)}, "
             f"{state.llm_tokens} LLM tokens, {state.llm_cached_tokens} of them cached and {state.llm_reasoning_tokens} "
             f"reasoning ({cost})"]
    finished = {entry["file"]: entry for entry in state.finished}
    for index, job in enumerate(state.jobs):
        name = job.label
        entry = finished.get(f"{job.name}.py")
        if entry is not None:
            lines.append(f"  {name}: {_finished_line(entry)} ({plural(entry['experiments'], 'experiment')}; "
                         f"{entry['stopped_because']})")
        elif run_state.job_ended(state, index):
            lines.append(f"  {name}: skipped (its starter fails bench.py)")
        elif (progress := run_state.progress_of(state, index)) is not None:
            gain = progress.gain()
            figure = (f", {SPEED_UNKNOWN}" if policy.verdict(progress.best) == SPEED_UNKNOWN else
                      f", best {format_speedup(gain)} over its baseline" if gain else "")
            saved = ("" if not is_run_stop(state.stopped_because) else ", best so far saved"
                     if policy.is_saved(progress.best) else ", no gain over PyTorch's best so far")
            lines.append(f"  {name}: {'cut short' if state.stopped_because else 'in progress'} after "
                         f"{plural(progress.experiments, 'experiment')}" + figure + saved)
        else:
            # True of a job never begun and of one whose baseline the budget cut short (no row, benched again).
            lines.append(f"  {name}: no baseline yet")
    lines += [f"  the plan: {caveat}" for caveat in state.plan_caveats]
    if state.model and state.model.get("flags"):
        lines.append(f"  model: {shown_flags(state.model['flags'])} (`autokernel verify` with no model checks the "
                     f"kernels in it)")
    if not state.done:
        lines.append(f"  {RESUME_HINT}")
    return lines


def _spent_words(state: RunState) -> str:
    """What the budget went to, " (profiling 0m09s, baselines 0m36s, experiments 4m10s)"; with several GPUs
    the benches overlap, so their times are summed over the GPUs and can pass the wall time."""
    spent = state.spent_s
    if not spent:                    # a state from before this was recorded
        return ""
    parts = [f"{name} {format_duration(spent.get(name, 0.0))}" for name in (PROFILING, BASELINES, EXPERIMENTS)]
    gpus = len(state.throughput.gpus)
    return f" ({', '.join(parts)}" + (f"; benches summed over {gpus} GPUs" if gpus > 1 else "") + ")"


def _finished_line(entry: dict) -> str:
    """A finished job's ending and its figures; without meaningful timings (CPU) no speed is claimed."""
    verdict = entry["verdict"]
    if verdict == SPEED_UNKNOWN:
        return f"{SPEED_UNKNOWN} (timed in Triton's interpreter, which says nothing of speed), saved"
    vs_best = entry.get("best_speedup_vs_pytorch_best")
    vs_best_text = (f", {format_speedup(vs_best)} vs PyTorch's best" if vs_best is not None else
                    f", {format_speedup(entry['best_speedup_vs_pytorch'])} vs PyTorch eager"
                    if entry.get("best_speedup_vs_pytorch") is not None else "")
    ending = ("no gain alone: PyTorch's best is faster at every shape; saved for verify to try in the model"
              if verdict == NO_GAIN else "done")
    return f"{ending}, {format_speedup(entry['speedup_over_baseline'])} over its baseline" + vs_best_text
