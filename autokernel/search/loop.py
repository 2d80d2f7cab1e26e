"""The keep-or-revert loop over a run's kernel jobs (orchestrate.py describes it for the user).

Each step that writes does so in one order, with the run's state saved first, so a kill between
any two writes leaves a state resume can finish (autokernel/search/session.py):
  experiment  state(in_flight) -> kernel.py -> commit -> bench -> state(verdict, pending_row)
              -> reset on a revert -> results.tsv row -> state(row done)
  baseline    the same, with the job's starter as the candidate, benched twice
  finish      state(finishing) -> optimized_kernels/ -> commit -> state(saved)
Signals (Ctrl-C, SIGTERM, SIGHUP) are held back inside those steps and raised at their end.
Candidate code never runs in this process: only bench.py, in the sandbox (autokernel/judge/runner.py).
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Callable

import torch

from autokernel.agents.base import AgentContext, MalformedReply, OutOfTime, SearchExhausted
from autokernel.core import child_output, contracts, paths
from autokernel.core.contracts import FAIL, TIMEOUT, BenchResult, Job, JudgedResult, KeptVersion
from autokernel.core.run_records import BASELINES, EXPERIMENTS, JobProgress, RunState
from autokernel.core.errors import OptimizationError
from autokernel.core.interrupts import Interrupted, InterruptGuard
from autokernel.core.live import LoopStatus, ProgressView, format_duration, plural
from autokernel.judge import runner, user_check
from autokernel.search import gitops, integrity, policy, results, run_state
from autokernel.search.budget import ONE_RUN_BASELINE, BenchTimes, Budget, checked_dtypes
from autokernel.search.loop_records import BUDGET_SPENT, COST_REACHED, LoopRecords, budget_too_short, is_run_stop
from autokernel.search.policy import is_improvement, one_line

KERNEL_IN_REPO = gitops.KERNEL_FILE_NAME
BEST_VERSIONS_SHOWN = 3
STAGE_PREFIX = "STAGE "                       # a line the judge prints on stderr as it enters a stage
MIN_WORTH_STARTING_S = 1.0                    # with less left than this, nothing new is started


class OptimizationRun(LoopRecords):
    """One session of `autokernel optimize` over the run's kernel jobs."""

    def __init__(self, state: RunState, *, repo: gitops.KernelRepo, agent, view: ProgressView, budget: Budget,
                 checkpoint: Callable[[str], None] | None = None):
        self.state = state
        self.repo = repo
        self.agent = agent
        self.settings = state.settings
        self.view = view
        self.budget = budget
        self.guard = InterruptGuard()
        # Called after every write with its name: tests kill the run there to prove resume loses nothing.
        self.checkpoint = checkpoint or (lambda name: None)
        self.program = paths.PROGRAM_MD.read_text() if paths.PROGRAM_MD.exists() else ""
        self.quick_bench = self.settings.quick_bench or not torch.cuda.is_available()
        # The deadline from the start: "time left" counts down through profiling's end and the first baseline too.
        self._status = LoopStatus(llm_tokens=state.llm_tokens, llm_cached_tokens=state.llm_cached_tokens,
                                  llm_reasoning_tokens=state.llm_reasoning_tokens, cost_usd=state.cost_usd,
                                  deadline=budget.deadline())
        self._llm_s = 0.0                   # how long the last reply took: part of what an experiment costs
        self.bench_times = BenchTimes()     # what benches cost: their limits, and what the budget can pay for
        self._wall_mark = time.monotonic()  # the run's wall time counts on from here (Throughput)
        self._counted_until: dict[str, float] = {}   # per job: the end of the time its verdicts counted
        self.gpu = "gpu0" if torch.cuda.is_available() else "cpu"   # where this process's benches run
        self.candidates_per_reply = 1       # one GPU judges one candidate at a time: a reply gives one
        self.view.update(self._status)

    # ------------------------------------------------------------------ the run
    def run(self) -> RunState:
        self.state.stopped_because = None
        with self.guard:
            try:
                self._run_jobs()
            except BaseException as exc:
                self.state.stopped_because = (f"interrupted ({signal.Signals(exc.signum).name})"
                                              if isinstance(exc, Interrupted) else f"{type(exc).__name__}: {exc}")
                raise
            finally:
                # Whatever ended the session (done, budget, a signal, an AgentError), the tree is left at
                # the last kept commit and the state says so.
                with self.guard.critical():
                    run_state.settle_pending_row(self.state)
                    self.repo.reset_hard(self.state.kept_commit)
                    self.state.in_flight = None
                    self._save()
        return self.state

    def _run_jobs(self) -> None:
        state = self.state
        while state.job_index < len(state.jobs):
            if state.current is not None and state.current.finishing:
                self._save_best(state.job(), state.current, state.current.finishing)   # a kill cut it short
                continue
            job = state.job()
            self._status.kernel = (f"rank {job.rank} {job.type_label} "
                                   f"(job {state.job_index + 1} of {len(state.jobs)})")
            if state.current is None:
                stop = self._baseline_stop(job)
                if stop or not self._start_job(job):
                    if stop:
                        return self._stop(stop)
                    continue
            reason = self._optimize(job, state.current)
            self._save_best(job, state.current, reason)
            if is_run_stop(reason):
                return self._stop(reason)
        state.done = True
        state.stopped_because = "every kernel is done"

    def _stop(self, reason: str) -> None:
        self.state.stopped_because = reason
        left = run_state.unfinished(self.state)
        self.view.log(f"{reason}: {left} of {plural(len(self.state.jobs), 'kernel')} not finished; to go on, run "
                      f"`autokernel optimize --resume` with a larger {'--max-cost' if reason == COST_REACHED else '--budget'}")

    def _run_stop(self, needed_s: float = 0.0, what: str = "the next step") -> str | None:
        """COST_REACHED, or a budget reason when the run cannot pay for needed_s more (or any more), else None."""
        cap = self.settings.max_cost_usd
        if cap is not None and self.state.cost_usd >= cap:
            return COST_REACHED
        if self.budget.left() < max(needed_s, MIN_WORTH_STARTING_S):
            return self._short_of(needed_s, what)
        return None

    def _short_of(self, needed_s: float, what: str) -> str:
        """Why the budget stops the run, as it is: spent, or with time left that cannot pay for `what`."""
        left = self.budget.left()
        if left < MIN_WORTH_STARTING_S:
            return BUDGET_SPENT
        return budget_too_short(f"{format_duration(left)} left, and {what} takes about {format_duration(needed_s)}")

    def _baseline_stop(self, job: Job) -> str | None:
        """A run-ending reason when the budget left cannot pay for a run of the job's baseline, by its estimate
        (budget.BenchTimes.baseline_run_s)."""
        run_s = self.bench_times.baseline_run_s(job.kernel_type, results.read_rows(paths.RESULTS_TSV),
                                                meaningful=torch.cuda.is_available())
        return self._run_stop(needed_s=run_s or 0.0, what=f"a run of {job.label}'s baseline (as measured before)")

    # ------------------------------------------------------------------ one job
    def _start_job(self, job: Job) -> bool:
        """Commit the job's starter as the baseline and bench it twice; False (job skipped) when it does not pass."""
        source = Path(job.path)
        if not source.exists():
            raise OptimizationError(f"the job file {source} is gone; run `autokernel extract` again")
        number = self.state.experiment + 1
        started = time.monotonic()
        self.bench_times.baseline = {}
        self.view.log(f"baseline for {self._status.kernel}: {job.path}")
        with self.guard.critical():
            self.state.in_flight = {"step": "baseline", "number": number}
            self._save()
            self.checkpoint("baseline: in flight")
            shutil.copyfile(source, paths.KERNEL_FILE)
            baseline_commit = self.repo.commit_kernel(f"baseline {job.name}: {source.name}", self.state.tag)
            self.checkpoint("baseline: committed")
        runs = self._baseline_runs(job)
        if runs is None:
            return self._abandon(f"the budget ran out while {job.label}'s baseline was being benched; "
                                 f"--resume benches it again", spent_on=BASELINES, started=started)
        return self._settle_baseline(job, runs, number, baseline_commit, started, gpu=self.gpu,
                                     bench_seconds=dict(self.bench_times.baseline))

    def _settle_baseline(self, job: Job, runs: list[BenchResult], number: int, commit: str, started: float, *, gpu: str,
                         bench_seconds: dict[str, float]) -> bool:
        """Record the committed baseline's verdict: the job starts from it, or is skipped (False) when it fails."""
        baseline, passed, noise, compile_us = policy.baseline_verdict(runs, self.settings.noise_floor)
        progress = None
        if passed:
            progress = JobProgress(baseline=baseline, best=baseline, noise=noise, compile_us=compile_us,
                                   kept=[KeptVersion(commit, baseline)], bench_seconds=bench_seconds)
        description = ("baseline fails its own bench" if not passed else f"baseline (noise {noise:.1%})"
                       if len(runs) > 1 else f"baseline ({ONE_RUN_BASELINE}: no time for a second; noise floor "
                                             f"{noise:.1%})")
        with self.guard.critical():
            index = run_state.index_of(self.state, job)
            if progress is not None:
                self.state.kept_commit = commit
                run_state.set_progress(self.state, index, progress)
            else:
                run_state.end_job(self.state, index)
            self._record(job, progress, number, baseline, description, contracts.STATUS_BASELINE, started,
                         keep=passed, gpu=gpu)
        if passed:
            self.view.log(f"exp {number} BASELINE PASS {baseline.latency_us:.1f} us, "
                          f"noise {noise:.1%}: a candidate must be more than that much faster to be kept"
                          + self._verdict_note(job, gpu))
            self._refresh_status(progress)
        else:
            self.view.log(f"skipping {job.label}: its starter fails bench.py "
                          f"({baseline.bench.correctness}): {one_line(baseline.bench.message or '', 300)}")
        return passed

    def _baseline_runs(self, job: Job) -> list[BenchResult] | None:
        """The starter benched twice (the second only after a PASS); None when the budget cut one short."""
        runs = []
        for attempt in (1, 2):
            if attempt == 2 and not self._second_run_fits(job, self.bench_times.baseline):
                break
            self.view.phase(f"baseline {job.label} (run {attempt} of 2)")
            # The first run also times torch.compile of the reference: PyTorch's best is the bar.
            result = self._judge(job, None, quick=self.quick_bench, first_baseline=attempt == 1, baseline=True,
                                 compare_compile=attempt == 1 and torch.cuda.is_available())
            if result is None:
                return None
            runs.append(result)
            if not result.passed:
                break
        return runs

    def _second_run_fits(self, job: Job, first: dict[str, float]) -> bool:
        """Whether the budget left pays for a baseline's second run (as long as its first); if not, the baseline
        stands on its first run, and the log says so."""
        first_s, left = self.bench_times.first_run_s(first), self.budget.left()
        if left >= max(first_s, MIN_WORTH_STARTING_S):
            return True
        self.view.log(f"{job.label}'s baseline stands on one run: {format_duration(left)} left cannot pay for a "
                      f"second ({format_duration(first_s)}); its noise is taken as the floor")
        return False

    def _optimize(self, job: Job, progress: JobProgress) -> str:
        """Run experiments until a stopping rule fires; returns the reason."""
        self._refresh_status(progress)
        while True:
            reason = self._run_stop() or policy.job_stop_reason(progress, self.settings)
            if reason:
                return reason
            try:
                reason = self._experiment(job, progress)
            except SearchExhausted as exc:
                return f"the agent has nothing left to try ({exc})"
            if reason:
                return reason

    def _experiment(self, job: Job, progress: JobProgress) -> str | None:
        """One experiment; returns a run-ending reason when the budget could not pay for it."""
        number = self.state.experiment + 1
        bench_s = self.bench_times.expected(progress, quick=True,      # on a GPU: the screen, in the job's dtype
                                            dtypes=checked_dtypes(job.kernel_type, one_dtype=not self.quick_bench))
        if self.budget.left() < max(self.bench_times.experiment_s(self._llm_s, bench_s), MIN_WORTH_STARTING_S):
            return self._short_of(self.bench_times.experiment_s(self._llm_s, bench_s), "an experiment")
        started = time.monotonic()
        proposal = self._next_queued(progress)          # a candidate an earlier reply queued: no question
        if proposal is None:
            if stop := self._cost_stop():
                return stop
            self.view.phase(f"exp {number}: asking {self.agent.name}")
            try:
                proposal = self.agent.propose(self._agent_context(job, progress, deadline=self.budget.deadline() - bench_s))
            except OutOfTime as exc:
                self.view.log(f"exp {number} not run: {exc}")
                return budget_too_short(str(exc))
            except MalformedReply as exc:
                # Nothing was written or committed; the row keeps the tokens the reply cost.
                self._account(exc)
                self._record_malformed(job, progress, number, exc, started)
                return None
            self._llm_s = time.monotonic() - started
            # Paid for now, whatever happens next: the state counts every call, the rows the ones judged.
            self._account(proposal)
            self._take_reply(job, progress, proposal)
        if self.budget.left() < bench_s:
            self.view.log(f"exp {number} not judged: {format_duration(self.budget.left())} left cannot pay for a "
                          f"{format_duration(bench_s)} bench")
            return self._short_of(bench_s, "a bench")
        description = self._described(proposal)
        against = progress.best
        try:
            integrity.check_contract(proposal.kernel_source, job.kernel_type)
        except integrity.ContractError as exc:         # not judged: no GPU's experiment
            failed = runner.synthesized_result(FAIL, f"contract: {exc}", kernel_type=job.kernel_type)
            result, gpu = JudgedResult(failed), ""
        else:
            result = self._judge_candidate(job, progress, number, proposal.kernel_source, description, started)
            gpu = self.gpu
        if result is None:
            return BUDGET_SPENT
        keep = is_improvement(result, progress.best, progress.noise)
        with self.guard.critical():
            if keep:
                self.state.kept_commit = self.repo.head()
                progress.best = result
                progress.kept.append(KeptVersion(self.state.kept_commit, result))
            self._record(job, progress, number, result, description,
                         contracts.STATUS_KEEP if keep else contracts.STATUS_REVERT, started, paid=proposal,
                         keep=keep, gpu=gpu, against=against)
        return None

    def _judge_candidate(self, job: Job, progress: JobProgress, number: int, source: str, description: str,
                         started: float) -> JudgedResult | None:
        """Commit the candidate (its contract checked) and judge it; None when the budget cut the judging short."""
        with self.guard.critical():
            self.state.in_flight = {"step": "experiment", "number": number}
            self._save()
            self.checkpoint("experiment: in flight")
            paths.KERNEL_FILE.write_text(source)
            self.checkpoint("experiment: kernel written")
            self.repo.commit_kernel(f"exp {number}: {description}", self.state.tag)
            self.checkpoint("experiment: committed")
        # Screen with the quick judge in the job's dtype alone (each dtype compiles a candidate's new
        # tiles again); only a candidate that passes it and looks faster pays for the full judge, in
        # every dtype, whose verdict and timing decide. Without a GPU every run is quick already.
        self.view.phase(f"exp {number}: judging (quick screen)" if not self.quick_bench else f"exp {number}: judging")
        result = self._judge(job, progress, quick=True, screen=not self.quick_bench)
        if result is not None and not self.quick_bench and is_improvement(result, progress.best, progress.noise):
            if self.budget.left() < self.bench_times.expected(progress, quick=False,
                                                              dtypes=checked_dtypes(job.kernel_type, one_dtype=False)):
                result = None
            else:
                self.view.phase(f"exp {number}: judging (full)")
                result = self._judge(job, progress, quick=False)
        if result is None:
            self._abandon(f"exp {number} not finished: the budget ran out while it was judged; it is not recorded",
                          spent_on=EXPERIMENTS, started=started)
            return None
        judged = policy.against_pytorch_best(result, progress.compile_us, progress.noise)
        if is_improvement(judged, progress.best, progress.noise) and user_check.needs_check(judged.bench):
            judged = self._checked_for_keeping(job, judged, number)
            if judged is None:
                self._abandon(f"exp {number} not finished: the budget ran out while it was checked in a user's "
                              f"process; it is not recorded", spent_on=EXPERIMENTS, started=started)
        return judged

    def _checked_for_keeping(self, job: Job, judged: JudgedResult, number: int) -> JudgedResult | None:
        """A candidate about to be kept, run in a user's process first (autokernel/judge/user_check.py), with the
        integrity checks around it as around a bench: the result as it was, the FAIL that says why not, or None
        when the budget cut the check short (its limit is cut to the budget left, as a bench's is)."""
        self.view.phase(f"exp {number}: checking it in a user's process")
        limit, clipped = self.bench_times.check_limit(user_check.TIMEOUT_S, self.budget.left())
        started = time.monotonic()

        def check() -> BenchResult:
            return user_check.keep_only_if_checked(judged.bench, paths.KERNEL_FILE, kernel_type=job.kernel_type,
                                                   shapes=job.shapes, dtype=job.dtype, seed=self.state.experiment + 1,
                                                   timeout_s=limit)

        checked = integrity.checked_bench(self.repo, self.state.kept_commit, job.kernel_type, check)
        if checked.correctness == TIMEOUT and clipped:
            return None
        if checked.correctness != TIMEOUT:
            self.bench_times.record_check(time.monotonic() - started)
        return judged if checked is judged.bench else JudgedResult(checked)

    def _abandon(self, message: str, *, spent_on: str, started: float) -> bool:
        """Undo an experiment (or baseline) the budget cut short: no row, the number is used again on resume. Its
        time still counts in what the run's time went to (spent_on: BASELINES or EXPERIMENTS), which rows alone
        left short by the whole cut step."""
        with self.guard.critical():
            self.repo.reset_hard(self.state.kept_commit)
            self.state.in_flight = None
            self.state.spent_s[spent_on] = round(self.state.spent_s.get(spent_on, 0.0) + time.monotonic() - started, 2)
            self._save()
        self.view.log(message)
        return False

    def _judge(self, job: Job, progress: JobProgress | None, *, quick: bool, screen: bool = False,
               compare_compile: bool = False, first_baseline: bool = False, baseline: bool = False) -> BenchResult | None:
        """bench.py on kernel.py in the sandbox, with the integrity checks around it; None when cut by the budget.
        compare_compile also times torch.compile of the reference; that run's duration (compilation included) is not
        what later benches cost, so it is not counted in their expected time. A baseline checks the job's dtype alone."""
        quick, dtypes = quick or self.quick_bench, checked_dtypes(job.kernel_type, one_dtype=screen or baseline)
        limit, clipped = self.bench_times.limit(progress, quick, self.settings.experiment_timeout_s, self.budget.left(),
                                                first_baseline=first_baseline, dtypes=dtypes)
        timed = {}

        def bench() -> BenchResult:
            started = time.monotonic()
            with child_output.watch_output(self._on_bench_line):
                result = runner.run_bench(paths.KERNEL_FILE, shapes=job.shapes, dtype=job.dtype, timeout_s=limit,
                                          seed=self.state.experiment + 1,
                                          extra_args=(["--screen"] if screen else ["--quick"] * quick)
                                                     + ["--one-dtype"] * baseline + ["--compare-compile"] * compare_compile)
            timed.update(seconds=time.monotonic() - started, result=result)
            self._count_gpu(self.gpu, busy_s=timed["seconds"])
            return result

        result = integrity.checked_bench(self.repo, self.state.kept_commit, job.kernel_type, bench)
        if result.correctness == TIMEOUT and clipped:
            return None
        if result.correctness != TIMEOUT and result is timed.get("result"):     # bench's own verdict
            self.bench_times.record(progress, timed["seconds"], quick=quick, compare_compile=compare_compile,
                                    baseline=baseline)
        return result

    def _on_bench_line(self, line: str) -> None:
        if line.startswith(STAGE_PREFIX):
            base = self.view.status.phase.split(" [", 1)[0]
            self.view.phase(f"{base} [{line[len(STAGE_PREFIX):].strip()}]")

    def _agent_context(self, job: Job, progress: JobProgress, *, deadline: float) -> AgentContext:
        best_first = sorted(progress.kept, key=lambda kept: kept.result.latency_us or float("inf"))
        best_versions = [(self.repo.file_at(kept.commit, KERNEL_IN_REPO), kept.result.bench)
                         for kept in best_first[:BEST_VERSIONS_SHOWN]]
        last = progress.last_result
        return AgentContext(kernel_type=job.kernel_type, kernel_source=self._kept_source(progress),
                            last_result=last.bench if last else None, history=list(progress.history),
                            best_versions=best_versions, program=self.program, job=job.to_json(),
                            baseline=progress.baseline.bench, deadline=deadline, failure=progress.failure,
                            older=list(progress.older), max_candidates=self.candidates_per_reply)
