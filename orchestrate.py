"""The overnight keep-or-revert loop: profile a model, then optimize its hottest kernels one at a time in git.

For each kernel job, in Amdahl order:
  1. the job's starter is copied into kernel.py, committed as the baseline and benched twice;
  2. the agent proposes a complete new kernel.py, committed as "exp N: <description>";
  3. bench.py judges it in a child process with a time limit (autokernel/runner.py): first the
     quick judge (fewer sweep and edge shapes) as a screen, then, only for a candidate that passes
     it and looks faster, the full judge, whose verdict and timing are the ones that count;
  4. the candidate is KEPT when it passes and beats the best so far by more than the noise, otherwise
     `git reset --hard` returns to the last kept commit. Every experiment gets a results.tsv row.

The noise rule: the two baseline runs give latencies a and b; noise = |a - b| / min(a, b), never
below `noise_floor` (2 %). A candidate is kept when best_latency / candidate_latency > 1 + noise,
so a change that timing jitter alone could explain is not kept.

A kernel is done after `max_consecutive_reverts` reverts in a row, at `peak_fraction_target` of
the hardware peak, after `kernel_time_s` on it, at `target_speedup` over its baseline, or when the
agent has nothing left to try. Its best version is then committed as
optimized_kernels/<rank>_<type>.py and recorded in optimized_kernels/manifest.json. The global
budget ends the run cleanly after saving the current kernel's best.

workspace/state.json is rewritten after every experiment; Ctrl-C or SIGTERM resets the tree to the
last kept commit and leaves a state from which `--resume` continues (same branch, same numbering).
Candidate code never runs in this process: only bench.py, in a child, imports kernel.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from autokernel import gitops, paths, plugin, results, runner
from autokernel.agents.base import AgentContext, MalformedReply, SearchExhausted, make_agent
from autokernel.live import LoopStatus, ProgressView, format_duration

STATE_FILE = paths.WORKSPACE / "state.json"
KERNEL_IN_REPO = gitops.KERNEL_FILE_NAME
HISTORY_KEPT = 50        # experiments of the current kernel remembered for the agent
BEST_VERSIONS_SHOWN = 3
DESCRIPTION_CHARS = 200
BUDGET_SPENT = "the run's time budget is spent"
TAG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CPU_NOTE = ("no CUDA GPU: bench.py runs the kernels on CPU through the Triton interpreter (with --quick), so "
            "correctness is checked for real but timings, and the keep decisions made from them, are not meaningful")


@dataclass
class LoopSettings:
    budget_s: float = 8 * 3600
    experiment_timeout_s: float = 900           # one bench run; bench.py's stage limits usually fire first
    max_consecutive_reverts: int = 5
    peak_fraction_target: float = 0.9
    kernel_time_s: float = 2 * 3600
    target_speedup: float = 2.0
    noise_floor: float = 0.02
    quick_bench: bool = False                   # bench.py --quick for every run (always on without a GPU)


class OptimizationError(Exception):
    """A run cannot start or resume; the message says why and what to do."""


@dataclass
class JobProgress:
    """Where the loop stands on the current kernel job."""
    baseline: dict
    best: dict
    noise: float
    experiments: int = 0
    consecutive_reverts: int = 0
    elapsed_s: float = 0.0
    last_result: dict | None = None
    history: list[dict] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)    # {"commit", "result"} per kept version, baseline first

    def gain(self) -> float | None:
        """Baseline latency over best latency: how much faster the best version is."""
        base, best = self.baseline.get("latency_us"), self.best.get("latency_us")
        return base / best if base and best else None


@dataclass
class RunState:
    """Everything --resume needs, saved as workspace/state.json."""
    tag: str
    jobs: list[dict]
    kept_commit: str                 # the tree returns here on every revert and after an interruption
    budget_s: float
    job_index: int = 0
    experiment: int = 0              # the last experiment number written to results.tsv
    elapsed_s: float = 0.0
    llm_tokens: int = 0
    cost_usd: float = 0.0
    current: JobProgress | None = None
    finished: list[dict] = field(default_factory=list)
    done: bool = False

    def save(self, path: Path | None = None) -> None:
        """Write atomically: a kill halfway through leaves the previous state, never half a file."""
        path = path or STATE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".json.tmp")
        scratch.write_text(json.dumps(asdict(self), indent=2))
        os.replace(scratch, path)

    @classmethod
    def load(cls, path: Path | None = None) -> RunState:
        path = path or STATE_FILE
        if not path.exists():
            raise OptimizationError(f"nothing to resume: {path} does not exist")
        try:
            data = json.loads(path.read_text())
            current = data.pop("current")
            return cls(**data, current=JobProgress(**current) if current else None)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise OptimizationError(f"{path} is not a state file this version can resume ({exc}); "
                                    f"move it aside to start a new run") from exc


def is_improvement(result: dict, best: dict, noise: float) -> bool:
    """The keep rule: a PASS whose latency beats the best by more than the noise."""
    latency, best_latency = result.get("latency_us"), best.get("latency_us")
    if result.get("correctness") != "PASS" or not latency or not best_latency:
        return False
    return best_latency / latency > 1 + noise


def measured_noise(first: dict, second: dict, floor: float) -> float:
    a, b = first.get("latency_us"), second.get("latency_us")
    if not a or not b:
        return floor
    return max(floor, abs(a - b) / min(a, b))


def job_name(job: dict) -> str:
    return f"{job['rank']}_{job['kernel_type']}"


def _one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    return " ".join(str(text).split())[:limit] or "(no description)"


class _InterruptGuard:
    """Turns SIGTERM into KeyboardInterrupt, and holds both back while git and the state are updated.

    An interruption between "commit" and "record" would leave a commit no state knows about, so
    those steps run as critical sections and a signal that arrives inside one is raised at its end.
    """

    def __init__(self):
        self._depth = 0
        self._pending = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self._depth:
            self._pending = True
        else:
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    @contextlib.contextmanager
    def critical(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                raise KeyboardInterrupt("interrupted")


class OptimizationRun:
    """One `autokernel optimize` run over a list of kernel jobs."""

    def __init__(self, state: RunState, *, repo: gitops.KernelRepo, agent, settings: LoopSettings,
                 view: ProgressView):
        self.state = state
        self.repo = repo
        self.agent = agent
        self.settings = settings
        self.view = view
        self.guard = _InterruptGuard()
        self.program = paths.PROGRAM_MD.read_text() if paths.PROGRAM_MD.exists() else ""
        self.quick_bench = settings.quick_bench or not torch.cuda.is_available()
        self._session_started = time.monotonic()
        self._elapsed_before = state.elapsed_s
        self._status = LoopStatus()
        self._last_bench_s = 0.0      # how long the latest bench.py run took: the cost of one more

    # ------------------------------------------------------------------ the run
    def run(self) -> RunState:
        with self.guard:
            try:
                self._run_jobs()
            finally:
                # Whatever ended the run (done, budget, Ctrl-C, AgentError), the tree is left at the
                # last kept commit and the state says so.
                with self.guard.critical():
                    self.repo.reset_hard(self.state.kept_commit)
                    self._save_state()
        return self.state

    def _run_jobs(self) -> None:
        while self.state.job_index < len(self.state.jobs):
            if self._out_of_budget():
                self.view.log(f"{BUDGET_SPENT}: {len(self.state.jobs) - self.state.job_index} kernels not optimized; "
                              f"to go on, run again with --resume and a larger --budget")
                return
            job = self.state.jobs[self.state.job_index]
            self._status.kernel = (f"rank {job['rank']} {job['kernel_type']} "
                                   f"(job {self.state.job_index + 1} of {len(self.state.jobs)})")
            if self.state.current is None and not self._start_job(job):
                continue
            self._finish_job(job, self.state.current, self._optimize(job, self.state.current))
        self.state.done = True
        self.view.log(f"all {len(self.state.jobs)} kernels done")

    def _elapsed(self) -> float:
        return self._elapsed_before + time.monotonic() - self._session_started

    def _budget_left(self) -> float:
        return self.settings.budget_s - self._elapsed()

    def _out_of_budget(self) -> bool:
        """True when what is left would not cover one more bench run like the last one."""
        return self._budget_left() <= self._last_bench_s

    def _save_state(self) -> None:
        self.state.elapsed_s = self._elapsed()
        self.state.budget_s = self.settings.budget_s
        self.state.save()

    # ------------------------------------------------------------------ one job
    def _start_job(self, job: dict) -> bool:
        """Commit the job's starter as the baseline and bench it twice; False (job skipped) when it does not pass."""
        self.view.log(f"baseline for {self._status.kernel}: {job['path']}")
        source = Path(job["path"])
        if not source.exists():
            raise OptimizationError(f"the job file {source} is gone; run `autokernel extract` again")
        started = time.monotonic()
        number = self.state.experiment + 1
        with self.guard.critical():
            shutil.copyfile(source, paths.KERNEL_FILE)
            baseline_commit = self.repo.commit_kernel(f"baseline {job_name(job)}: {source.name}")
        runs = [self._bench(job, seed=number)]
        if runs[0].get("correctness") == "PASS":
            runs.append(self._bench(job, seed=number))
        failure = next((run for run in runs if run.get("correctness") != "PASS"), None)
        # The faster run is the baseline: candidates must beat what the starter can do, not its bad luck.
        baseline = failure or min(runs, key=lambda run: run.get("latency_us") or float("inf"))
        passed = failure is None
        # A baseline cut short by the end of the budget says nothing about the starter: --resume retries it.
        out_of_time = not passed and self._budget_left() <= 0
        noise = measured_noise(runs[0], runs[-1], self.settings.noise_floor)
        with self.guard.critical():
            description = f"baseline (noise {noise:.1%})" if passed else "baseline fails its own bench"
            self._append_row(job, number, baseline, description, results.STATUS_BASELINE, started, tokens=0)
            if passed:
                self.state.kept_commit = baseline_commit
                self.state.current = JobProgress(baseline=baseline, best=baseline, noise=noise,
                                                 elapsed_s=time.monotonic() - started,
                                                 kept=[{"commit": baseline_commit, "result": baseline}])
            else:
                self.repo.reset_hard(self.state.kept_commit)
                self.state.job_index += 0 if out_of_time else 1
            self._save_state()
        if passed:
            self.view.log(f"exp {number} BASELINE PASS {baseline.get('latency_us'):.1f} us, "
                          f"noise {noise:.1%}: a candidate must be more than that much faster to be kept")
        elif out_of_time:
            self.view.log(f"the budget ran out while {job_name(job)}'s baseline was being benched; --resume retries it")
        else:
            self.view.log(f"skipping {job_name(job)}: its starter fails bench.py "
                          f"({baseline.get('correctness')}): {_one_line(baseline.get('message') or '', 300)}")
        return passed

    def _optimize(self, job: dict, progress: JobProgress) -> str:
        """Run experiments until a stopping rule fires; returns the reason."""
        self._refresh_status(progress)
        while True:
            reason = self._stop_reason(progress)
            if reason:
                return reason
            try:
                self._experiment(job, progress)
            except SearchExhausted as exc:
                return f"the agent has nothing left to try ({exc})"

    def _stop_reason(self, progress: JobProgress) -> str | None:
        settings = self.settings
        if self._out_of_budget():
            return BUDGET_SPENT
        if progress.consecutive_reverts >= settings.max_consecutive_reverts:
            return f"{progress.consecutive_reverts} reverts in a row"
        if progress.elapsed_s >= settings.kernel_time_s:
            return f"{format_duration(progress.elapsed_s)} spent on this kernel"
        gain = progress.gain()
        if gain is not None and gain >= settings.target_speedup:
            return f"{gain:.2f}x over its baseline"
        pct_peak = progress.best.get("pct_peak")
        if pct_peak is not None and pct_peak >= settings.peak_fraction_target * 100:
            return f"{pct_peak:.0f}% of the hardware peak"
        return None

    def _experiment(self, job: dict, progress: JobProgress) -> None:
        number = self.state.experiment + 1
        started = time.monotonic()
        try:
            proposal = self.agent.propose(self._agent_context(job, progress))
        except MalformedReply as exc:
            # Nothing was written or committed; the row keeps the tokens the reply cost.
            result = runner.synthesized_result("FAIL", f"malformed reply: {exc}", kernel_type=job["kernel_type"])
            with self.guard.critical():
                self._record(job, progress, number, result, "malformed reply", results.STATUS_REVERT, started,
                             exc.tokens_in + exc.tokens_out, exc.cost_usd)
            return
        description = _one_line(proposal.description)
        with self.guard.critical():
            paths.KERNEL_FILE.write_text(proposal.kernel_source)
            self.repo.commit_kernel(f"exp {number}: {description}")
        # Screen with the quick judge; only a candidate that passes it and looks faster pays for the
        # full judge, whose verdict and timing decide. Without a GPU every run is quick already.
        result = self._bench(job, seed=number, quick=True)
        if not self.quick_bench and is_improvement(result, progress.best, progress.noise):
            result = self._bench(job, seed=number, quick=False)
        keep = is_improvement(result, progress.best, progress.noise)
        with self.guard.critical():
            if keep:
                self.state.kept_commit = self.repo.head()
                progress.best = result
                progress.kept.append({"commit": self.state.kept_commit, "result": result})
            else:
                self.repo.reset_hard(self.state.kept_commit)
            self._record(job, progress, number, result, description,
                         results.STATUS_KEEP if keep else results.STATUS_REVERT, started,
                         proposal.tokens_in + proposal.tokens_out, proposal.cost_usd)

    def _bench(self, job: dict, *, seed: int, quick: bool = False) -> dict:
        limit = max(1.0, min(self.settings.experiment_timeout_s, self._budget_left()))
        started = time.monotonic()
        result = runner.run_bench(paths.KERNEL_FILE, shapes=job["shapes"], dtype=job["dtype"], timeout_s=limit,
                                  seed=seed, extra_args=["--quick"] if quick or self.quick_bench else [])
        if result.get("correctness") != "TIMEOUT":     # a hang says nothing about what a bench costs
            self._last_bench_s = time.monotonic() - started
        return result

    def _agent_context(self, job: dict, progress: JobProgress) -> AgentContext:
        best_first = sorted(progress.kept, key=lambda k: k["result"].get("latency_us") or float("inf"))
        best_versions = [(self.repo.file_at(k["commit"], KERNEL_IN_REPO), k["result"])
                         for k in best_first[:BEST_VERSIONS_SHOWN]]
        return AgentContext(kernel_type=job["kernel_type"], kernel_source=paths.KERNEL_FILE.read_text(),
                            last_result=progress.last_result, history=list(progress.history),
                            best_versions=best_versions, program=self.program,
                            job={**job, "baseline": progress.baseline})

    # ------------------------------------------------------------------ bookkeeping
    def _append_row(self, job: dict, number: int, result: dict, description: str, status: str,
                    started: float, tokens: int) -> None:
        row = results.make_row(experiment=number, tag=self.state.tag, kernel_type=job["kernel_type"],
                               result=result, description=description, status=status,
                               wall_seconds=round(time.monotonic() - started, 2), llm_tokens=tokens)
        results.append_row(paths.RESULTS_TSV, row)
        self.state.experiment = number

    def _record(self, job: dict, progress: JobProgress, number: int, result: dict, description: str,
                status: str, started: float, tokens: int, cost_usd: float | None) -> None:
        self._append_row(job, number, result, description, status, started, tokens)
        progress.experiments += 1
        progress.elapsed_s += time.monotonic() - started
        progress.consecutive_reverts = 0 if status == results.STATUS_KEEP else progress.consecutive_reverts + 1
        progress.last_result = result
        progress.history = (progress.history + [{
            "experiment": number, "description": description, "status": status,
            **{key: result.get(key) for key in ("correctness", "throughput", "latency_us", "speedup_vs_pytorch",
                                                "message")}}])[-HISTORY_KEPT:]
        self.state.llm_tokens += tokens
        self.state.cost_usd += cost_usd or 0.0
        self._save_state()
        self._status.session_experiments += 1
        self._status.last_result = self._describe(number, status, result, description, progress)
        self.view.log(self._status.last_result)
        self._refresh_status(progress)

    def _describe(self, number: int, status: str, result: dict, description: str, progress: JobProgress) -> str:
        latency = result.get("latency_us")
        passed = result.get("correctness") == "PASS"
        timing = (f"{latency:.1f} us ({progress.baseline['latency_us'] / latency:.2f}x baseline)"
                  if passed and latency and progress.baseline.get("latency_us") else "-")
        line = f"exp {number} {status.upper()} {result.get('correctness')} {timing}: {description}"
        if not passed and result.get("message"):
            line += f" [{_one_line(result['message'], 160)}]"
        return line

    def _refresh_status(self, progress: JobProgress) -> None:
        status = self._status
        status.experiments = self.state.experiment
        status.kernel_experiments = progress.experiments
        status.best_speedup = progress.gain()
        status.best_vs_pytorch = progress.best.get("speedup_vs_pytorch")
        status.deadline = time.monotonic() + self._budget_left()
        self.view.update(status)

    def _finish_job(self, job: dict, progress: JobProgress, reason: str) -> None:
        """Save the kept version (HEAD) as optimized_kernels/<rank>_<type>.py and commit it."""
        name = job_name(job)
        gain = progress.gain() or 1.0
        with self.guard.critical():
            paths.OPTIMIZED_DIR.mkdir(exist_ok=True)
            shutil.copyfile(paths.KERNEL_FILE, paths.OPTIMIZED_DIR / f"{name}.py")
            entry = {**plugin.manifest_entry(job, f"{name}.py"),
                     "baseline_latency_us": progress.baseline.get("latency_us"),
                     "best_latency_us": progress.best.get("latency_us"),
                     "speedup_over_baseline": round(gain, 4),
                     "baseline_speedup_vs_pytorch": progress.baseline.get("speedup_vs_pytorch"),
                     "best_speedup_vs_pytorch": progress.best.get("speedup_vs_pytorch"),
                     "timings_meaningful": progress.best.get("timings_meaningful"),
                     "experiments": progress.experiments, "stopped_because": reason,
                     "source_commit": self.state.kept_commit, "tag": self.state.tag}
            kernels = plugin.read_manifest(paths.MANIFEST_FILE) if paths.MANIFEST_FILE.exists() else {}
            plugin.write_manifest(paths.MANIFEST_FILE, {**kernels, name: entry})
            self.state.kept_commit = self.repo.commit_optimized(f"optimized {name}: {gain:.2f}x over its baseline")
            self.state.finished.append(entry)
            self.state.current = None
            self.state.job_index += 1
            self._save_state()
        self.view.log(f"{name} done ({reason}): {gain:.2f}x over its baseline after {progress.experiments} "
                      f"experiments, saved as optimized_kernels/{name}.py")


# ---------------------------------------------------------------------- starting and resuming
def default_tag(model: str | None, hf: str | None) -> str:
    stem = Path(model).stem if model else f"hf-{hf}" if hf else "run"
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")


def jobs_from_profile(model, inputs, *, name: str, top: int, log) -> list[dict]:
    """Profile an nn.Module into workspace/optimization_plan.json and extract its top kernels as jobs (Amdahl order)."""
    import extract
    from autokernel import profiler

    log(f"profiling {name} ...")
    profiler.profile_to_workspace(model, inputs, name=name, workspace=paths.WORKSPACE)
    plan_path = paths.WORKSPACE / profiler.PLAN_FILE
    jobs = extract.extract_jobs(plan_path, top, paths.WORKSPACE)
    if not jobs:
        raise OptimizationError(f"the profile found no kernel that AutoKernel can optimize (plan: {plan_path})")
    for job in jobs:
        log(f"job rank {job['rank']}: {job['kernel_type']} ({job['share']:.1%} of the measured time, "
            f"{job['amdahl_2x']:.2f}x end to end if made 2x faster)")
    return sorted(jobs, key=lambda job: job["rank"])


def plan_jobs(model: str | None, *, class_name: str | None, input_shape: tuple[int, ...] | None,
              dtype: str | None, hf: str | None, model_kwargs: dict | None, top: int, log) -> list[dict]:
    """Load a model file (or --hf architecture), then profile and extract it (jobs_from_profile)."""
    from autokernel import models

    loaded = models.load_model(model, class_name=class_name, input_shape=input_shape, dtype=dtype, hf=hf,
                               model_kwargs=model_kwargs)
    return jobs_from_profile(loaded.model, loaded.inputs, name=loaded.name, top=top, log=log)


def run_optimization(model: str | None = None, *, class_name: str | None = None,
                     input_shape: tuple[int, ...] | None = None, dtype: str | None = None, hf: str | None = None,
                     model_kwargs: dict | None = None, agent: str | None = None, llm_model: str | None = None,
                     base_url: str | None = None,
                     top: int = 5, tag: str | None = None, resume: bool = False, jobs: list[dict] | None = None,
                     settings: LoopSettings | None = None, view: ProgressView | None = None) -> RunState:
    """Profile, extract and optimize (or resume a run); returns the final state.

    `jobs` (from jobs_from_profile, for a model already in memory) skips loading and profiling a model file.

    Raises OptimizationError, gitops.GitOpsError, ModelLoadError or AgentError with a message for
    the user, and KeyboardInterrupt when interrupted (the state is saved for --resume either way).
    """
    settings = settings or LoopSettings()
    view = view or ProgressView()
    repo = gitops.KernelRepo(paths.ROOT)
    repo.ensure_clean()
    chosen_agent = make_agent(agent, model=llm_model, base_url=base_url)
    if resume:
        state = RunState.load()
        if tag and tag != state.tag:
            raise OptimizationError(f"{STATE_FILE} holds run {state.tag!r}, not {tag!r}")
        if state.done:
            raise OptimizationError(f"run {state.tag!r} already finished; start a new one without --resume")
        repo.checkout_branch(state.tag)
        repo.reset_hard(state.kept_commit)
        view.log(f"resuming run {state.tag} at experiment {state.experiment + 1}, "
                 f"job {state.job_index + 1} of {len(state.jobs)}")
    else:
        if STATE_FILE.exists() and not RunState.load().done:
            raise OptimizationError(f"{STATE_FILE} holds an unfinished run: pass --resume to continue it, "
                                    f"or delete the file to start a new one")
        tag = tag or default_tag(model, hf)
        if not TAG_PATTERN.match(tag):
            raise OptimizationError(f"bad tag {tag!r}: use letters, digits, '.', '_' and '-'")
        repo.ensure_new_branch(tag)
        if jobs is None:
            jobs = plan_jobs(model, class_name=class_name, input_shape=input_shape, dtype=dtype, hf=hf,
                             model_kwargs=model_kwargs, top=top, log=view.log)
        repo.start_branch(tag)
        state = RunState(tag=tag, jobs=jobs, kept_commit=repo.head(), budget_s=settings.budget_s,
                         experiment=max((row["experiment"] for row in results.read_rows(paths.RESULTS_TSV)),
                                        default=0))
        state.save()
        view.log(f"run {tag} on branch {gitops.branch_name(tag)} with agent {chosen_agent.name}, "
                 f"budget {format_duration(settings.budget_s)}")
    if not torch.cuda.is_available():
        view.log(CPU_NOTE)
    with view:
        return OptimizationRun(state, repo=repo, agent=chosen_agent, settings=settings, view=view).run()


if __name__ == "__main__":
    from autokernel import cli

    sys.exit(cli.main(["optimize", *sys.argv[1:]]))
