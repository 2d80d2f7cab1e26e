"""The keep-or-revert loop with several GPUs: one orchestrator, one judge worker per GPU (autokernel/pool.py).

The orchestrator is this one process. It keeps the run's branch, asks the agent, decides keep or
revert, commits, and writes results.tsv and the state, exactly as the one-GPU loop does
(autokernel/loop.py; the writes are LoopRecords'); only the judging is handed out. Per job:
  - the baseline's two runs are judged side by side on two workers (the noise then includes the
    difference between GPUs, which the candidates, judged on either, also meet);
  - while a worker is free and the job goes on, the agent is asked for another candidate, told
    which ones are being judged (ctx.in_flight), so it proposes from another direction; each
    candidate goes to a free worker as a whole kernel file, which the worker judges in a private
    folder of its own (autokernel/judge_worker.py), so parallel candidates never clobber a file
    and never share a GPU;
  - each verdict, as it comes back, is committed on the run's branch as "exp N" (numbered in the
    order verdicts arrive) and kept or reverted against the job's best at that moment, with the
    one-GPU loop's writes in the one-GPU loop's order, so the history reads as one run, and a kill
    at any point leaves what `--resume` already finishes. Candidates still being judged when the
    orchestrator dies were never recorded: they leave nothing to undo and are proposed again.
When a stopping rule fires, no new candidate is started; those in flight are judged and recorded.
A worker that dies takes only its own candidate with it: a CRASH row, and the pool starts another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from autokernel import contracts, integrity, paths, policy, runner
from autokernel.agents.base import MalformedReply, OutOfTime, Proposal, SearchExhausted, WaitForResults
from autokernel.contracts import FAIL, TIMEOUT, Job, JobProgress, JudgeOutcome, JudgeTask
from autokernel.loop import BUDGET_SPENT, MIN_WORTH_STARTING_S, OptimizationRun
from autokernel.policy import is_improvement, one_line
from autokernel.pool import WorkerPool

POLL_S = 0.5            # how often the orchestrator looks up from waiting, to redraw the view


@dataclass
class Flight:
    """A candidate being judged: what it is, when it was asked for, what it cost, and its limits' origin."""
    proposal: Proposal
    description: str
    started: float
    clipped: bool           # its limit was cut to the budget left: a TIMEOUT then means "out of time"


class ParallelRun(OptimizationRun):
    """OptimizationRun with the judging spread over a pool of workers, one per GPU."""

    def __init__(self, state, *, pool: WorkerPool, **kwargs):
        super().__init__(state, **kwargs)
        self.pool = pool
        pool.throughput = state.throughput       # the pool counts each GPU's busy time into the run's state
        self.gpu = pool.labels[0]
        self._seed = state.experiment            # each task's seed: fresh inputs for every bench

    # ------------------------------------------------------------------ a job's baseline
    def _baseline_runs(self, job: Job) -> list[dict] | None:
        source = paths.KERNEL_FILE.read_text()
        self.view.phase(f"baseline {job.name} (2 runs side by side)" if self.pool.size > 1 else f"baseline {job.name}")
        cuda = torch.cuda.is_available()
        tasks = [self._task(job, None, source, quick=self.quick_bench, compare_compile=attempt == 0 and cuda)
                 for attempt in range(2)]
        outcomes = self.pool.judge_all([task for task, _ in tasks])
        runs = []
        for attempt, ((_, clipped), outcome) in enumerate(zip(tasks, outcomes)):
            result = self._checked(job, outcome)
            if result.get("correctness") == TIMEOUT and clipped:
                return None
            if result.get("correctness") != TIMEOUT:
                for seconds in outcome.bench_seconds.values():      # none when its worker died
                    self.bench_times.record(None, seconds, quick=True, compare_compile=attempt == 0 and cuda)
            runs.append(result)
        self._baseline_gpu = outcomes[0].gpu
        return runs

    # ------------------------------------------------------------------ a job's experiments
    def _optimize(self, job: Job, progress: JobProgress) -> str:
        self._refresh_status(progress)
        flights: dict[int, Flight] = {}
        reason = None
        while True:
            while self.pool.free():
                # The rules are read before every proposal: a malformed reply or a broken contract is recorded
                # at once, and counts as a revert, as with one GPU.
                reason = reason or self._run_stop() or policy.job_stop_reason(progress, self.settings)
                if reason:
                    break
                try:
                    reason = self._dispatch(job, progress, flights)
                except WaitForResults:
                    if not flights:
                        reason = "the agent has nothing left to try (it waits for results, and none are coming)"
                    break
                except SearchExhausted as exc:
                    reason = f"the agent has nothing left to try ({exc})"
            if not self.pool.busy:
                return reason
            shown = f"judging {len(flights)} candidates on {self.pool.size} GPUs"
            self.view.phase(shown + (f"; then {reason}" if reason else ""))
            finished = self.pool.next_finished(POLL_S)
            if finished is not None:
                self._settle(job, progress, flights.pop(finished.slot), finished.outcome)
                reason = reason or self._run_stop() or policy.job_stop_reason(progress, self.settings)
            self._refresh_status(progress)

    def _dispatch(self, job: Job, progress: JobProgress, flights: dict[int, Flight]) -> str | None:
        """Ask the agent for one more candidate and hand it to a free worker; a run-ending reason, or None."""
        bench_s = self.bench_times.expected(progress, quick=True)
        if self.budget.left() < max(self._llm_s + bench_s, MIN_WORTH_STARTING_S):
            return BUDGET_SPENT
        started = time.monotonic()
        context = self._agent_context(job, progress, deadline=self.budget.deadline() - bench_s)
        context.in_flight = [flight.description for flight in flights.values()]
        try:
            proposal = self.agent.propose(context)
        except OutOfTime as exc:
            self.view.log(f"no more candidates: {exc}")
            return BUDGET_SPENT
        except MalformedReply as exc:
            result = runner.synthesized_result(FAIL, f"malformed reply: {exc}", kernel_type=job.kernel_type)
            self._account(exc.tokens_in + exc.tokens_out, exc.cost_usd)
            with self.guard.critical():
                self._record(job, progress, self.state.experiment + 1, result, "malformed reply",
                             contracts.STATUS_REVERT, started, tokens=exc.tokens_in + exc.tokens_out,
                             cost=exc.cost_usd, keep=False, gpu="")
            return None
        self._llm_s = time.monotonic() - started
        self._account(proposal.tokens_in + proposal.tokens_out, proposal.cost_usd)
        description = one_line(proposal.description)
        try:
            integrity.check_contract(proposal.kernel_source, job.kernel_type)
        except integrity.ContractError as exc:
            flight = Flight(proposal, description, started, clipped=False)
            result = runner.synthesized_result(FAIL, f"contract: {exc}", kernel_type=job.kernel_type)
            self._commit_verdict(job, progress, flight, result, gpu="")
            return None
        task, clipped = self._task(job, progress, proposal.kernel_source, quick=True)
        slot = self.pool.submit(task)
        flights[slot] = Flight(proposal, description, started, clipped)
        self.view.log(f"{self.pool.labels[slot]}: judging {description}")
        return None

    def _task(self, job: Job, progress: JobProgress | None, source: str, *, quick: bool,
              compare_compile: bool = False) -> tuple[JudgeTask, bool]:
        """A worker's task for source, with the one-GPU loop's limits; and whether the budget clipped them."""
        quick = quick or self.quick_bench
        ceiling, left = self.settings.experiment_timeout_s, self.budget.left()
        limit, clipped = self.bench_times.limit(progress, quick, ceiling, left)
        full_limit = full_below = None
        if progress is not None and not self.quick_bench and progress.best.get("latency_us"):
            # The screen decides whether the full judge runs, on the same GPU, right after it.
            full_limit, full_clipped = self.bench_times.limit(progress, False, ceiling, left)
            full_below, clipped = progress.best["latency_us"] / (1 + progress.noise), clipped or full_clipped
        screen = progress is not None and not self.quick_bench
        extra = (["--screen"] if screen else ["--quick"] * quick) + ["--compare-compile"] * compare_compile
        self._seed += 1
        return JudgeTask(kernel_source=source, kernel_type=job.kernel_type, shapes=list(job.shapes), dtype=job.dtype,
                         timeout_s=limit, seed=self._seed, extra_args=extra, full_timeout_s=full_limit,
                         full_below_us=full_below, bench_script=str(paths.BENCH_SCRIPT)), clipped

    # ------------------------------------------------------------------ a verdict
    def _checked(self, job: Job, outcome: JudgeOutcome) -> dict:
        result = outcome.result
        if result.get("kernel_type") not in (None, job.kernel_type):
            return runner.synthesized_result(FAIL, f"contract: bench.py judged it as {result['kernel_type']!r}, not "
                                                   f"this job's {job.kernel_type!r}", kernel_type=job.kernel_type)
        return result

    def _settle(self, job: Job, progress: JobProgress, flight: Flight, outcome: JudgeOutcome) -> None:
        result = self._checked(job, outcome)
        if result.get("correctness") == TIMEOUT and flight.clipped:
            self.view.log(f"{flight.description}: not finished, the budget ran out while it was judged; not recorded")
            return
        if result.get("correctness") != TIMEOUT:
            for kind, seconds in outcome.bench_seconds.items():
                self.bench_times.record(progress, seconds, quick=kind == "quick", compare_compile=False)
        result = policy.against_pytorch_best(result, progress.compile_us, progress.noise)
        self._commit_verdict(job, progress, flight, result, gpu=outcome.gpu)

    def _commit_verdict(self, job: Job, progress: JobProgress, flight: Flight, result: dict, *, gpu: str) -> None:
        """The one-GPU loop's experiment writes, in its order: state, kernel.py, commit, verdict (LoopRecords)."""
        number = self.state.experiment + 1
        keep = is_improvement(result, progress.best, progress.noise)
        proposal = flight.proposal
        with self.guard.critical():
            self.state.in_flight = {"step": "experiment", "number": number}
            self._save()
            self.checkpoint("experiment: in flight")
            paths.KERNEL_FILE.write_text(proposal.kernel_source)
            self.checkpoint("experiment: kernel written")
            self.repo.commit_kernel(f"exp {number}: {flight.description}", self.state.tag)
            self.checkpoint("experiment: committed")
            if keep:
                self.state.kept_commit = self.repo.head()
                progress.best = result
                progress.kept.append({"commit": self.state.kept_commit, "result": result})
            self._record(job, progress, number, result, flight.description,
                         contracts.STATUS_KEEP if keep else contracts.STATUS_REVERT, flight.started,
                         tokens=proposal.tokens_in + proposal.tokens_out, cost=proposal.cost_usd, keep=keep, gpu=gpu)
        if hasattr(self.agent, "judged"):
            self.agent.judged(job.to_json(), proposal.kernel_source, result)
