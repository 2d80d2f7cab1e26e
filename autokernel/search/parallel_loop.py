"""The keep-or-revert loop with several GPUs: one orchestrator, one judge worker per GPU (autokernel/fleet/pool.py),
and the plan's jobs side by side on them.

The orchestrator is this one process. It keeps the run's branch, asks the agent, decides keep or revert, commits,
and writes results.tsv and the state, as the one-GPU loop does (autokernel/search/loop.py; the writes are
LoopRecords'); only the judging is handed out, and the waiting for an LLM's reply: each question runs on a thread of
its own (autokernel/search/proposals.py), and the orchestrator goes on collecting and committing verdicts and
serving other jobs meanwhile. A free worker gets work at once, from the jobs in flight (autokernel/search/lanes.py)
before any other, and among them in plan order:
  - a job's baseline: its starter benched twice, on two GPUs where free (the noise includes their difference);
  - a job's candidate: one an earlier reply queued, else the agent is asked for one more (one per GPU at most; the
    rest are queued), told which of the job's are being judged (ctx.in_flight); it goes to the worker as a whole
    kernel file, judged in a private folder (autokernel/fleet/judge_worker.py). One question per job at a time;
  - when no job in flight can use the worker (its baseline is being judged, its agent thinks or waits, it is
    ending), the plan's next job opens on it. At most one job per GPU is in flight, and never two of one kernel type
    (results.tsv names a row's job by its kernel type); a candidate to keep is checked in a user's process first.
A reply is taken back on this thread and handled as with one GPU (LoopRecords._take_reply): a malformed one or a
broken contract is recorded; one the budget cannot bench, or that comes after its job stopped, is paid, not judged.
Each verdict, as it comes back, is committed on the run's one branch, numbered in arrival order and naming its job
("exp N (1_softmax): ..."), with the one-GPU loop's writes in their order, and kept or reverted against its own job's
best. A baseline, too, is committed only once its verdict is in, so between two verdicts the branch's tip is the last
kept commit, of whichever job: a revert resets to it and drops its own commit alone, never another job's keep. Each
job's working copy is its last kept commit's kernel.py, read from git (the tree holds whichever job's verdict came
last). A job whose stopping rule fires starts nothing new; once its candidates in flight are recorded its best is
saved and its workers go to the others. Rules, per job, as with one GPU: reverts in a row, its own time
(--kernel-budget: its wall time with something judged, overlaps counted once), target speedup, peak. The run's budget
is one clock the jobs in flight draw on together, none starting what it cannot pay for; a job opens only while the
budget left can pay for its baseline (--top K: the same K jobs open in plan order; a later one may end first).
A task being judged, or a reply out, when the orchestrator dies or stops was never recorded: nothing to undo (a stop
does not wait for replies); `--resume` reopens every started job where its state says (autokernel/search/run_state.py).
A worker that dies takes only its own task with it: a CRASH, and a new worker.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from autokernel.agents.base import MalformedReply, OutOfTime, SearchExhausted, WaitForResults
from autokernel.core import contracts, paths
from autokernel.core.contracts import FAIL, TIMEOUT, Job, JudgedResult, JudgeOutcome, JudgeTask, KeptVersion
from autokernel.core.run_records import JobProgress
from autokernel.core.errors import OptimizationError
from autokernel.core.live import format_duration, throughput_line
from autokernel.core.throughput import JobSpan
from autokernel.fleet.pool import Finished, WorkerPool
from autokernel.judge import runner, user_check
from autokernel.search import integrity, policy, run_state
from autokernel.search.budget import checked_dtypes
from autokernel.search.lanes import Flight, Lane, lanes_line
from autokernel.search.loop import MIN_WORTH_STARTING_S, OptimizationRun
from autokernel.search.loop_records import BUDGET_SPENT, budget_too_short, is_run_stop
from autokernel.search.proposals import Proposals, Reply

POLL_S = 0.5            # how often the orchestrator looks up from waiting, to redraw the view
WAITS_FOR_NOTHING = "the agent has nothing left to try (it waits for results, and none are coming)"


class ParallelRun(OptimizationRun):
    """OptimizationRun with the judging spread over a pool of workers, one per GPU, and jobs side by side."""

    def __init__(self, state, *, pool: WorkerPool, **kwargs):
        super().__init__(state, **kwargs)
        self.pool = pool
        pool.throughput = state.throughput       # the pool counts each GPU's busy time into the run's state
        self.gpu = pool.labels[0]
        self.candidates_per_reply = pool.size    # judged side by side: a reply may hold one per GPU (the rest queue)
        self._seed = state.experiment            # each task's seed: fresh inputs for every bench
        self.lanes: list[Lane] = []              # the jobs in flight, in plan order
        self._no_new_jobs: str | None = None     # a run-ending reason once no job may open any more
        self.proposals = Proposals(self.agent)   # the questions out to the agent, each on a thread of its own

    # ------------------------------------------------------------------ the schedule
    def _run_jobs(self) -> None:
        state = self.state
        for index, progress in run_state.open_jobs(state):
            if progress.finishing:                                   # a kill cut its save short
                self._save_best(state.jobs[index], progress, progress.finishing)
        self.lanes = [Lane(index, state.jobs[index], progress=progress) for index, progress in run_state.open_jobs(state)]
        for lane in self.lanes:                                      # resumed: in flight again from now, if not before
            state.throughput.jobs.setdefault(lane.job.name, JobSpan(started_s=self._loop_clock(lane.started)))
        while True:
            for reply in self.proposals.take():     # the replies back: judged, recorded or dropped here
                self._reply_back(reply)
            while len(self.pool.free()) > self.proposals.out and self._serve_one():   # a free worker per reply out
                pass
            if self._end_stopped_lanes():            # their workers, and their kernel types, are free for others
                continue
            if not self.pool.busy and not self.proposals.out:
                break
            out = self.proposals.out
            self.view.phase(f"judging on {len(self.pool.busy)} of {self.pool.size} GPUs"
                            + (f", {out} job{'s' * (out > 1)} waiting on {self.agent.name}" if out else ""))
            finished = self.proposals.next_finished(self.pool, POLL_S)    # or None once a reply is back
            if finished is not None:
                self._task_back(finished)
            self._refresh_status(None)
        if run_state.unfinished(state):
            return self._stop(self._no_new_jobs or BUDGET_SPENT)
        state.done = True
        state.stopped_because = "every kernel is done"

    def _serve_one(self) -> bool:
        """Give one free worker work: a baseline's second run, a job's candidate (in plan order), else the
        plan's next job; a second run waits for another GPU than its first's while others can use this one."""
        for strict in (True, False):
            for lane in sorted(self.lanes, key=lambda lane: (lane.progress is not None, lane.index)):
                if self._serve(lane, strict):
                    return True
            lane = self._open_next() if strict else None
            if lane is not None and self._serve(lane, strict=False):
                return True
        return False

    def _serve(self, lane: Lane, strict: bool) -> bool:
        """Hand a free worker the lane's next task, or hold it for the reply the agent is asked for (True);
        False when the lane has none now (lane.stop says when it never will)."""
        if lane.stop or lane.waiting or lane.asking or lane.baseline_slot is not None:
            return False
        if lane.progress is None:
            return self._serve_baseline(lane, strict)
        while not (lane.stop or lane.waiting):
            # The rules are read before every proposal: a malformed reply or a broken contract is recorded
            # at once, as with one GPU (a broken contract as a revert, a malformed reply on its own count).
            lane.stop = self._run_stop() or policy.job_stop_reason(lane.progress, self.settings)
            if lane.stop:
                break
            if self._ask(lane):
                return True
        return False

    def _open_next(self) -> Lane | None:
        """The plan's next job, opened, if one may open now (see the module's docstring); else None."""
        if self._no_new_jobs or len(self.lanes) >= self.pool.size:
            return None
        opened = {lane.index for lane in self.lanes}
        index = next((index for index in range(self.state.job_index, len(self.state.jobs))
                      if index not in opened and not run_state.job_ended(self.state, index)
                      and run_state.progress_of(self.state, index) is None), None)
        if index is None or any(lane.job.kernel_type == self.state.jobs[index].kernel_type for lane in self.lanes):
            return None
        job = self.state.jobs[index]
        self._no_new_jobs = self._baseline_stop(job)
        if self._no_new_jobs:
            return None
        source = Path(job.path)
        if not source.exists():
            raise OptimizationError(f"the job file {source} is gone; run `autokernel extract` again")
        lane = Lane(index, job, source=source.read_text())
        self.lanes = sorted(self.lanes + [lane], key=lambda lane: lane.index)
        self.state.throughput.jobs.setdefault(job.name, JobSpan(started_s=self._loop_clock(lane.started)))
        self.view.log(f"baseline for rank {job.rank} {job.type_label} (job {index + 1} of {len(self.state.jobs)}): "
                      f"{job.path}")
        return lane

    def _end_stopped_lanes(self) -> bool:
        """Save the best of every job that stopped and has nothing in flight (a run-ending reason keeps it
        open for --resume); True when one ended."""
        ended = [lane for lane in self.lanes if lane.stop and not lane.busy]
        for lane in ended:
            self.lanes.remove(lane)
            if is_run_stop(lane.stop):
                self._no_new_jobs = self._no_new_jobs or lane.stop
            self._save_best(lane.job, lane.progress, lane.stop)
            if not is_run_stop(lane.stop):
                self._end_span(lane.job)
        return bool(ended)

    def _task_back(self, finished: Finished) -> None:
        lane: Lane = finished.token
        if (span := self.state.throughput.jobs.get(lane.job.name)) is not None:
            span.benches[finished.outcome.gpu] = span.benches.get(finished.outcome.gpu, 0) + 1
        self._status.kernel = (f"rank {lane.job.rank} {lane.job.type_label} "
                               f"(job {lane.index + 1} of {len(self.state.jobs)})")
        if finished.slot == lane.baseline_slot:
            self._baseline_back(lane, finished)
            return
        flight = lane.flights.pop(finished.slot)
        lane.waiting = False
        self._settle(lane.job, lane.progress, flight, finished.outcome)
        lane.stop = lane.stop or policy.job_stop_reason(lane.progress, self.settings)

    # ------------------------------------------------------------------ a job's baseline
    def _serve_baseline(self, lane: Lane, strict: bool) -> bool:
        free = self.pool.free()
        if lane.runs:                       # the second run: on another GPU than the first's, where one is free
            others = [slot for slot in free if slot != lane.first_slot]
            if strict and not others and self.pool.size > 1:
                return False
            free = others or free
            if self._run_stop():
                self._drop(lane, f"before {lane.job.label}'s baseline was benched twice")
                return False
        first = not lane.runs
        task, lane.baseline_clipped = self._task(lane.job, None, lane.source, quick=self.quick_bench,
                                                 compare_compile=first and torch.cuda.is_available(), timing=lane)
        lane.baseline_slot = self.pool.submit(task, lane, slot=free[0])
        self.view.log(f"{self.pool.labels[lane.baseline_slot]}: baseline run {len(lane.runs) + 1} of 2 "
                      f"for {lane.job.label}")
        return True

    def _baseline_back(self, lane: Lane, finished: Finished) -> None:
        lane.baseline_slot = None
        result = integrity.of_the_jobs_type(finished.outcome.result, lane.job.kernel_type)
        if result.correctness == TIMEOUT and lane.baseline_clipped:
            self._drop(lane, f"while {lane.job.label}'s baseline was being benched")
            return
        first = not lane.runs
        if result.correctness != TIMEOUT:
            for seconds in finished.outcome.bench_seconds.values():      # none when its worker died
                self.bench_times.record(lane, seconds, quick=self.quick_bench, baseline=True,
                                        compare_compile=first and torch.cuda.is_available())
        if first:
            lane.first_slot, lane.first_gpu = finished.slot, finished.outcome.gpu
        lane.runs.append(result)
        if result.passed and len(lane.runs) < 2 and self._second_run_fits(lane.job, lane.bench_seconds):
            return                          # the second run goes to the next free worker
        job, number = lane.job, self.state.experiment + 1
        with self.guard.critical():         # the one-GPU loop's baseline writes, the commit made now
            self.state.in_flight = {"step": "baseline", "number": number}
            self._save()
            self.checkpoint("baseline: in flight")
            paths.KERNEL_FILE.write_text(lane.source)
            commit = self.repo.commit_kernel(f"baseline {job.name}: {Path(job.path).name}", self.state.tag)
            self.checkpoint("baseline: committed")
            passed = self._settle_baseline(job, lane.runs, number, commit, lane.started, gpu=lane.first_gpu,
                                           bench_seconds=dict(lane.bench_seconds))
        if passed:
            lane.progress = run_state.progress_of(self.state, lane.index)
        else:
            self.lanes.remove(lane)
            self._end_span(job)

    def _drop(self, lane: Lane, when: str) -> None:
        """Give up a baseline the budget cut short (`when`): nothing committed or recorded, no job opens any more."""
        self.lanes.remove(lane)
        self._no_new_jobs = self._no_new_jobs or BUDGET_SPENT
        self.view.log(f"the budget ran out {when}; --resume benches it again")

    # ------------------------------------------------------------------ a job's candidates
    def _ask(self, lane: Lane) -> bool:
        """Ask the agent for the job's next candidate: True once the question is out (a free worker held for its
        reply) or the candidate is on a worker; False when the budget cannot pay, or an instant reply was not judged."""
        job, progress = lane.job, lane.progress
        bench_s = self.bench_times.expected(progress, quick=True,      # on a GPU: the screen, in the job's dtype
                                            dtypes=checked_dtypes(job.kernel_type, one_dtype=not self.quick_bench))
        if self.budget.left() < max(self.bench_times.experiment_s(self._llm_s, bench_s), MIN_WORTH_STARTING_S):
            lane.stop = self._short_of(self.bench_times.experiment_s(self._llm_s, bench_s), "an experiment")
            return False
        started, queued = time.monotonic(), self._next_queued(progress)   # an earlier reply's: no question
        if queued is not None:
            return self._reply_back(Reply(lane, None, started, bench_s, proposal=queued, queued=True))
        if stop := self._cost_stop():
            lane.stop = stop
            return False
        context = self._agent_context(job, progress, deadline=self.budget.deadline() - bench_s)
        context.in_flight = [flight.description for flight in lane.flights.values()]
        reply = self.proposals.ask(Reply(lane, context, started, bench_s))
        return reply is None or self._reply_back(reply)

    def _reply_back(self, reply: Reply) -> bool:
        """The agent's reply (or a queued candidate), on this thread: a candidate goes to a free worker (True); the
        rest as with one GPU (a malformed reply or broken contract recorded, an AgentError raised)."""
        lane, job, progress, error = reply.lane, reply.lane.job, reply.lane.progress, reply.error
        if isinstance(error, WaitForResults):
            lane.waiting = bool(lane.flights)
            # Verdicts that came back while it answered are results it has not seen: it is asked again.
            if not (lane.flights or reply.context.in_flight):
                lane.stop = lane.stop or WAITS_FOR_NOTHING
            return False
        if isinstance(error, SearchExhausted):
            lane.stop = lane.stop or f"the agent has nothing left to try ({error})"
            return False
        if isinstance(error, OutOfTime):
            self.view.log(f"no more candidates for {job.label}: {error}")
            lane.stop = budget_too_short(str(error))
            return False
        if error is not None and not isinstance(error, MalformedReply):
            raise error
        if not reply.queued:                            # paid for now, whatever happens next
            self._account(reply.proposal or error)
        if lane.stop:
            self.view.log(f"a reply for {job.label} came after it stopped ({lane.stop}); not judged")
            return False
        if isinstance(error, MalformedReply):
            self._record_malformed(job, progress, self.state.experiment + 1, error, reply.started)
            return False
        proposal = reply.proposal
        if not reply.queued:
            self._llm_s = time.monotonic() - reply.started
            self._take_reply(job, progress, proposal)
        if self.budget.left() < reply.bench_s:
            self.view.log(f"a candidate for {job.label} not judged: {format_duration(self.budget.left())} left "
                          f"cannot pay for a {format_duration(reply.bench_s)} bench")
            lane.stop = self._short_of(reply.bench_s, "a bench")
            return False
        description = self._described(proposal)
        try:
            integrity.check_contract(proposal.kernel_source, job.kernel_type)
        except integrity.ContractError as exc:
            flight = Flight(proposal, description, reply.started, clipped=False)
            result = JudgedResult(runner.synthesized_result(FAIL, f"contract: {exc}", kernel_type=job.kernel_type))
            self._commit_verdict(job, progress, flight, result, gpu="")
            return False
        task, clipped = self._task(job, progress, proposal.kernel_source, quick=True)
        slot = self.pool.submit(task, lane)
        lane.flights[slot] = Flight(proposal, description, reply.started, clipped, task.check_timeout_s)
        self.view.log(f"{self.pool.labels[slot]}: judging {description} [{job.label}]")
        return True

    def _task(self, job: Job, progress: JobProgress | None, source: str, *, quick: bool,
              compare_compile: bool = False, timing: Lane | None = None) -> tuple[JudgeTask, bool]:
        """A worker's task for source, with the one-GPU loop's limits (from timing's benches, for a baseline, which
        checks the job's dtype alone, else the job's); and whether the budget clipped them."""
        quick, baseline = quick or self.quick_bench, timing is not None
        screen = progress is not None and not self.quick_bench
        ceiling, left = self.settings.experiment_timeout_s, self.budget.left()
        limit, clipped = self.bench_times.limit(timing or progress, quick, ceiling, left,
                                                first_baseline=baseline and not timing.runs,
                                                dtypes=checked_dtypes(job.kernel_type, one_dtype=screen or baseline))
        full_limit = full_below = None
        if progress is not None and not self.quick_bench and progress.best.latency_us:
            # The screen decides whether the full judge runs, on the same GPU, right after it.
            full_limit, full_clipped = self.bench_times.limit(progress, False, ceiling, left,
                                                              dtypes=checked_dtypes(job.kernel_type, one_dtype=False))
            full_below, clipped = progress.best.latency_us / (1 + progress.noise), clipped or full_clipped
        extra = ((["--screen"] if screen else ["--quick"] * quick) + ["--one-dtype"] * baseline
                 + ["--compare-compile"] * compare_compile)
        self._seed += 1
        return JudgeTask(kernel_source=source, kernel_type=job.kernel_type, shapes=list(job.shapes), dtype=job.dtype,
                         timeout_s=limit, seed=self._seed, extra_args=extra, full_timeout_s=full_limit,
                         full_below_us=full_below, bench_script=runner.STAND_IN_JUDGE and str(runner.STAND_IN_JUDGE),
                         best_us=progress and progress.best.latency_us, noise=progress and progress.noise,
                         check_timeout_s=self.bench_times.check_limit(user_check.TIMEOUT_S, left)[0]), clipped

    # ------------------------------------------------------------------ a verdict
    def _settle(self, job: Job, progress: JobProgress, flight: Flight, outcome: JudgeOutcome) -> None:
        result = integrity.of_the_jobs_type(outcome.result, job.kernel_type)
        if cut := flight.cut_by_budget(result):
            self.view.log(flight.not_recorded(cut))
            return
        if result.correctness != TIMEOUT:
            for kind, seconds in outcome.bench_seconds.items():
                self.bench_times.record(progress, seconds, quick=kind == "quick", compare_compile=False)
        self.bench_times.record_check(outcome.check_seconds)
        judged = policy.against_pytorch_best(result, progress.compile_us, progress.noise)
        self._commit_verdict(job, progress, flight, judged, gpu=outcome.gpu)

    def _commit_verdict(self, job: Job, progress: JobProgress, flight: Flight, result: JudgedResult, *,
                        gpu: str) -> None:
        """The one-GPU loop's experiment writes, in its order: state, kernel.py, commit, verdict (LoopRecords)."""
        number = self.state.experiment + 1
        proposal = flight.proposal
        if policy.is_improvement(result, progress.best, progress.noise) and user_check.needs_check(result.bench):
            flight.check_limit_s = self.bench_times.check_limit(user_check.TIMEOUT_S, self.budget.left())[0]
            checked = user_check.check_source(result.bench, proposal.kernel_source, job, seed=self._seed,
                                              timeout_s=flight.check_limit_s)      # cut to the budget, as a worker's
            if cut := flight.cut_by_budget(checked):       # no verdict, as in _settle
                return self.view.log(flight.not_recorded(cut))
            result = result if checked is result.bench else JudgedResult(checked)
        keep, against = policy.is_improvement(result, progress.best, progress.noise), progress.best
        with self.guard.critical():
            self.state.in_flight = {"step": "experiment", "number": number}
            self._save()
            self.checkpoint("experiment: in flight")
            paths.KERNEL_FILE.write_text(proposal.kernel_source)
            self.checkpoint("experiment: kernel written")
            self.repo.commit_kernel(f"exp {number} ({job.name}): {flight.description}", self.state.tag)
            self.checkpoint("experiment: committed")
            if keep:
                self.state.kept_commit = self.repo.head()
                progress.best = result
                progress.kept.append(KeptVersion(self.state.kept_commit, result))
            self._record(job, progress, number, result, flight.description,
                         contracts.STATUS_KEEP if keep else contracts.STATUS_REVERT, flight.started,
                         paid=proposal, keep=keep, gpu=gpu, against=against)
        self.agent.judged(job.to_json(), proposal.kernel_source, result.bench)

    # ------------------------------------------------------------------ each job's own
    def _verdict_note(self, job: Job, gpu: str) -> str:
        return f" [{job.label}" + (f" on {gpu}]" if gpu else "]")

    def _loop_clock(self, at: float | None = None) -> float:
        """The loop's wall time at time.monotonic() `at` (default: now): Throughput.wall_s and what is not saved yet."""
        return self.state.throughput.wall_s + (time.monotonic() if at is None else at) - self._wall_mark

    def _end_span(self, job: Job) -> None:
        if (span := self.state.throughput.jobs.get(job.name)) is not None:
            span.ended_s = self._loop_clock()

    def _refresh_status(self, progress: JobProgress | None) -> None:
        """The live view: the jobs in flight and their GPUs, and the numbers of the job whose verdict came last."""
        self._status.jobs = lanes_line(self.lanes, self.pool.labels)
        if progress is not None:
            super()._refresh_status(progress)
            return
        self._status.gpus = throughput_line(self.state.throughput, time.monotonic() - self._wall_mark)
        self.view.update(self._status)
