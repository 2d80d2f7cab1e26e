"""The loop's bookkeeping writes: a verdict's row and state, a job's end, and the run's pace (a mixin of the loop).

`_record` makes a verdict's writes in their order (state, reset on a revert, results.tsv row,
state), `_save_best` a job's end (autokernel/search/loop.py's docstring gives both orders), and both the
one-GPU loop and the parallel one (autokernel/search/parallel_loop.py) use them, so a kill leaves the same
markers for resume to finish whichever ran. Both take the agent's replies the same way too
(`_take_reply`): the further candidates of a reply wait in the job's queue (JobProgress.queued) and
are judged before the agent is asked again; a fix of a failed candidate is numbered (at most two per
idea); an unreadable reply is recorded (`_record_malformed`) and counted apart from the reverts. `_count_gpu` keeps the run's Throughput: per GPU, the
experiments judged there and the seconds it spent judging; `_save` the wall time beside them.
"""

from __future__ import annotations

import time

from autokernel.agents.base import MalformedReply, Proposal
from autokernel.core import contracts, paths
from autokernel.core.contracts import FAIL, SPEED_UNKNOWN, Job, JudgedResult
from autokernel.core.run_records import BASELINES, EXPERIMENTS, JobProgress
from autokernel.core.live import throughput_line
from autokernel.judge import runner
from autokernel.kernel_types.regions import store as region_store
from autokernel.routing.manifest import manifest_entry, read_manifest, write_manifest
from autokernel.sandbox.redact import scrub
from autokernel.search import gitops, policy, results, run_log, run_state
from autokernel.search.policy import one_line

HISTORY_KEPT = 50        # experiments of a job remembered in full for the agent; older ones as a summary line
QUEUED_KEPT = 8          # candidates of replies waiting to be judged, at most
# The run's stopping reasons: they end the run, not just the kernel; --resume goes on.
BUDGET_SPENT = "the run's time budget is spent"
COST_REACHED = "the run's cost cap is reached"
RUN_STOPS = (BUDGET_SPENT, COST_REACHED)
# A run stopped with time left that cannot pay for what comes next (a Retry-After wait the budget cannot
# cover, no time for an LLM reply): said with its reason, as budget_too_short(why) words it.
BUDGET_TOO_SHORT = "the time left in the run's budget is too short"


def budget_too_short(why: str) -> str:
    return f"{BUDGET_TOO_SHORT}: {why}"


def is_run_stop(reason: str | None) -> bool:
    """Whether a stopping reason ends the run, not just the kernel (its best so far is saved; --resume goes on)."""
    return reason in RUN_STOPS or (reason or "").startswith(BUDGET_TOO_SHORT)


class LoopRecords:
    """The writes of OptimizationRun (autokernel/search/loop.py) that record what was decided."""

    _call_cost: float | None = None     # what the last priced LLM call cost (None: not yet known in this process)
    # This run's experiments as status counts them (its results.tsv rows but the baselines): read from the file at
    # the first verdict, then counted on. Not state.experiment, the last number, which counts earlier runs' rows too.
    _run_experiments: int | None = None

    def _save(self) -> None:
        now = time.monotonic()
        self.state.throughput.wall_s += now - self._wall_mark
        self._wall_mark = now
        self.state.elapsed_s = self.budget.used()
        run_state.save(self.state)

    def _count_gpu(self, gpu: str, *, busy_s: float = 0.0, experiments: int = 0) -> None:
        use = self.state.throughput.gpu(gpu)
        use.busy_s += busy_s
        use.experiments += experiments

    def _account(self, paid: Proposal | MalformedReply) -> None:
        """Count what an agent's reply cost (its first candidate, or the unreadable reply, carries it)."""
        self.state.account(paid.tokens_in + paid.tokens_out, paid.cost_usd, cached=paid.tokens_cached,
                           reasoning=paid.tokens_reasoning)
        if paid.cost_usd is not None:
            self._call_cost = paid.cost_usd
        status, state = self._status, self.state
        status.llm_tokens, status.cost_usd = state.llm_tokens, state.cost_usd
        status.llm_cached_tokens, status.llm_reasoning_tokens = state.llm_cached_tokens, state.llm_reasoning_tokens
        status.cost_complete = not state.cost_unknown_calls

    def _cost_stop(self) -> str | None:
        """COST_REACHED when the next LLM call, expected to cost what the last one did, would take the spend past
        --max-cost: a reply's cost is known only once it is paid, so no call starts that the cap cannot pay for."""
        cap = self.settings.max_cost_usd
        if cap is None:
            return None
        if self._call_cost is None:         # a resumed run: its last priced row's cost
            priced = [row["cost_usd"] for row in results.read_rows(paths.RESULTS_TSV)
                      if row["tag"] == self.state.tag and row["cost_usd"]]
            self._call_cost = priced[-1] if priced else 0.0
        if self.state.cost_usd + self._call_cost <= cap:
            return None
        self.view.log(f"${self.state.cost_usd:.4f} of --max-cost ${cap:g} spent, and the next LLM call is expected "
                      f"to cost about ${self._call_cost:.4f} (as the last one did): no call is started")
        return COST_REACHED

    # ------------------------------------------------------------------ the agent's replies
    def _take_reply(self, job: Job, progress: JobProgress, proposal: Proposal) -> None:
        """A readable reply: fixes numbered, its further candidates queued (judged before the agent is asked
        again), and what its reading left out said."""
        failure = progress.failure
        for candidate in (proposal, *proposal.queued):
            if candidate.fix_of is not None:
                same = failure is not None and failure["experiment"] == candidate.fix_of
                candidate.fix_turn = failure["fix_turn"] + 1 if same else 1
        room = QUEUED_KEPT - len(progress.queued)
        progress.queued += [queued_entry(candidate) for candidate in proposal.queued[:max(room, 0)]]
        if proposal.queued:
            self.view.log(f"{job.label}: the reply held {len(proposal.queued) + 1} candidates; judging "
                          f"\"{one_line(proposal.description, 80)}\" first, {min(len(proposal.queued), max(room, 0))} "
                          f"queued after it")
        if proposal.note:
            self.view.log(f"{job.label}: {proposal.note}: judging \"{one_line(proposal.description, 80)}\"")

    def _next_queued(self, progress: JobProgress) -> Proposal | None:
        """The next candidate a reply queued (already paid for), or None."""
        return Proposal(**progress.queued.pop(0)) if progress.queued else None

    def _record_malformed(self, job: Job, progress: JobProgress, number: int, error: MalformedReply,
                          started: float) -> None:
        """An unreadable reply (asked again once, and already paid for: _account): a row that keeps its tokens;
        nothing judged."""
        result = JudgedResult(runner.synthesized_result(FAIL, f"malformed reply: {error}", kernel_type=job.kernel_type))
        with self.guard.critical():
            self._record(job, progress, number, result, "malformed reply", contracts.STATUS_REVERT, started,
                         paid=error, keep=False, gpu="", malformed=True)

    @staticmethod
    def _described(proposal: Proposal) -> str:
        """The experiment's one-line description (a fix says which failed experiment it fixes)."""
        description = one_line(proposal.description)
        if proposal.fix_of is not None:
            description = one_line(f"fix {proposal.fix_turn} of exp {proposal.fix_of}: {description}")
        return description

    # ------------------------------------------------------------------ a verdict
    def _record(self, job: Job, progress: JobProgress | None, number: int, result: JudgedResult, description: str,
                status: str, started: float, *, paid: Proposal | MalformedReply | None = None, keep: bool,
                gpu: str, against: JudgedResult | None = None, malformed: bool = False) -> None:
        """The verdict's writes, in their order (inside a critical section): state, reset, row, state.
        paid: the candidate (or unreadable reply) whose tokens and cost the row carries; gpu: where it was
        judged ("" when it was not: a malformed reply, a broken contract); against: the best it was judged
        against (the history's ratio and threshold)."""
        state = self.state
        if status == contracts.STATUS_KEEP and progress is not None and len(progress.kept) > 1:
            description += policy.keep_note(result, progress.kept[-2].result)
        tokens = paid.tokens_in + paid.tokens_out if paid is not None else 0
        row = results.make_row(experiment=number, tag=state.tag, kernel_type=job.kernel_type, result=result.bench,
                               description=description, status=status,
                               wall_seconds=round(time.monotonic() - started, 2), llm_tokens=tokens,
                               cost_usd=paid.cost_usd if paid is not None else None, gpu=gpu,
                               llm_cached_tokens=paid.tokens_cached if paid is not None else 0,
                               llm_reasoning_tokens=paid.tokens_reasoning if paid is not None else 0)
        state.pending_row, state.experiment, state.in_flight = row, number, None
        spent = BASELINES if status == contracts.STATUS_BASELINE else EXPERIMENTS
        state.spent_s[spent] = round(state.spent_s.get(spent, 0.0) + row["wall_seconds"], 2)
        if status != contracts.STATUS_BASELINE and gpu:     # judged there (not a malformed reply, a contract)
            self._count_gpu(gpu, experiments=1)
        if progress is not None and status != contracts.STATUS_BASELINE:
            progress.experiments += 1
            progress.elapsed_s += self._job_time(job, started)
            if malformed:                   # its own limit (--max-malformed), not a revert of an idea
                progress.malformed_in_a_row += 1
            else:
                progress.consecutive_reverts = 0 if keep else progress.consecutive_reverts + 1
                progress.malformed_in_a_row = 0
                progress.failure = failure_record(number, description, result, paid)
            progress.last_result = result
            hypothesis = getattr(paid, "hypothesis", "")
            history = progress.history + [policy.history_entry(number, description, status, result, against=against,
                                                               noise=progress.noise, hypothesis=hypothesis)]
            progress.older += [policy.older_entry(entry) for entry in history[:-HISTORY_KEPT]]
            progress.history = history[-HISTORY_KEPT:]
        agent_state = self.agent.state_dict()
        if agent_state is not None:
            state.agent_state = agent_state
        self._save()
        self.checkpoint("verdict saved")
        if not keep:
            self.repo.reset_hard(state.kept_commit)
            self.checkpoint("reverted")
        results.append_row(paths.RESULTS_TSV, row)
        if self._run_experiments is not None and status != contracts.STATUS_BASELINE:
            self._run_experiments += 1
        self._log(job, progress, row, result, status, paid)
        self.checkpoint("row written")
        state.pending_row = None
        self._save()
        self.checkpoint("row settled")
        if status != contracts.STATUS_BASELINE:
            self._status.last_result = (policy.describe_verdict(number, status, result, description, progress)
                                        + self._verdict_note(job, gpu))
            self.view.log(self._status.last_result)
            self._refresh_status(progress)

    def _log(self, job: Job, progress: JobProgress | None, row: dict, result: JudgedResult, status: str,
             paid: Proposal | MalformedReply | None) -> None:
        """The experiment's line in the run's log (autokernel/search/run_log.py): the whole error, the hypothesis,
        the diff against the version it was judged against (for a keep, the one before it), tokens and cost."""
        source = getattr(paid, "kernel_source", None)
        before = None
        if source is not None and progress is not None and progress.kept:
            base = progress.kept[-2 if status == contracts.STATUS_KEEP and len(progress.kept) > 1 else -1]
            try:
                before = self.repo.file_at(base.commit, gitops.KERNEL_FILE_NAME)
            except (gitops.GitOpsError, ValueError):      # no diff then; the row and the line stand
                before = None
        line = run_log.entry(row, job=job.name, bench=result.bench, hypothesis=getattr(paid, "hypothesis", ""),
                             diff_text=run_log.diff(before, source), tokens_in=getattr(paid, "tokens_in", 0),
                             tokens_out=getattr(paid, "tokens_out", 0))
        run_log.append(self.state.tag, line)

    def _job_time(self, job: Job, started: float) -> float:
        """The wall time a verdict adds to its job's: since it was asked for, less what the job's verdicts
        already counted (with several GPUs its experiments overlap; a job's time is its own wall time)."""
        now = time.monotonic()
        counted_until = self._counted_until.get(job.name, started)
        self._counted_until[job.name] = now
        return max(0.0, now - max(started, counted_until))

    def _verdict_note(self, job: Job, gpu: str) -> str:
        """What the log adds to a verdict's line (with jobs side by side: whose it is, and where it was judged)."""
        return ""

    def _kept_source(self, progress: JobProgress) -> str:
        """The job's working copy: its last kept commit's kernel file, read from git. (With jobs side by side
        the tree holds whichever job's verdict came last; with one GPU it holds this same file.)"""
        return self.repo.file_at(progress.kept[-1].commit, gitops.KERNEL_FILE_NAME)

    def _refresh_status(self, progress: JobProgress) -> None:
        self._status.gpus = throughput_line(self.state.throughput, time.monotonic() - self._wall_mark)
        if self._run_experiments is None:
            rows = results.read_rows(paths.RESULTS_TSV) if paths.RESULTS_TSV.exists() else []
            self._run_experiments = results.experiments_of([row for row in rows if row["tag"] == self.state.tag])
        self._status.show_job(self._run_experiments, progress, deadline=self.budget.deadline())
        # As status and the report say it: an interpreter's speedup (0.00014x vs PyTorch's best) is no speed at all.
        self._status.best_note = (None if progress.best.bench.timings_meaningful is not False
                                  else f"{SPEED_UNKNOWN} (timed in Triton's interpreter)")
        self.view.update(self._status)

    def _save_best(self, job: Job, progress: JobProgress, reason: str) -> None:
        """Save the kept version (HEAD) as optimized_kernels/<rank>_<type>.py and commit it, if it is correct
        (policy.is_saved): a winner, faster than PyTorch's best at one of the job's shapes; or "no gain" alone,
        for verify to try in the model; or, on CPU, where its speed is unknown (policy.verdict).

        A run-ending reason (budget, cost) saves the best so far and keeps the job open for --resume;
        any other ends the job.
        """
        name = job.name
        gain = progress.gain() or 1.0
        final = not is_run_stop(reason)
        verdict = policy.verdict(progress.best)
        saved = policy.is_saved(progress.best)
        self.view.phase(f"saving {job.label}" if saved else f"ending {job.label}: no gain")
        with self.guard.critical():
            progress.finishing = reason
            self._save()
            self.checkpoint("finish: in flight")
            entry = {**manifest_entry(job, f"{name}.py"),
                     **policy.outcome(progress, reason, source_commit=progress.kept[-1].commit, tag=self.state.tag),
                     "verdict": verdict, "saved": saved}
            if saved:
                paths.OPTIMIZED_DIR.mkdir(exist_ok=True)
                (paths.OPTIMIZED_DIR / f"{name}.py").write_bytes(self._kept_source(progress).encode())
                region_store.copy_to(job.kernel_type, paths.OPTIMIZED_DIR)     # a region's file goes with it
                kernels = read_manifest(paths.MANIFEST_FILE) if paths.MANIFEST_FILE.exists() else {}
                write_manifest(paths.MANIFEST_FILE, {**kernels, name: entry})
                self.checkpoint("finish: files written")
                outcome = SPEED_UNKNOWN if verdict == SPEED_UNKNOWN else f"{gain:.2f}x over its baseline"
                self.state.kept_commit = self.repo.commit_optimized(
                    f"optimized {name}: {outcome}" + ("" if final else " (so far)"), self.state.tag)
                self.checkpoint("finish: committed")
            progress.finishing = None
            if final:
                self.state.finished.append(entry)
                run_state.end_job(self.state, run_state.index_of(self.state, job))
            self._save()
            self.checkpoint("finish: saved")
        self.view.log(policy.describe_ending(name, progress, reason, final=final, title=job.title))


def queued_entry(proposal: Proposal) -> dict:
    """A queued candidate as JobProgress.queued keeps it (the state's JSON): Proposal's fields, nothing paid."""
    return {"description": proposal.description, "kernel_source": proposal.kernel_source,
            "hypothesis": proposal.hypothesis, "fix_of": proposal.fix_of, "fix_turn": proposal.fix_turn}


def failure_record(number: int, description: str, result: JudgedResult, candidate: Proposal | None) -> dict | None:
    """The failed candidate, as the next question shows it (a diff, the whole error) and a fix names it; None
    for a verdict that is not a failure of a candidate's code."""
    if result.passed or candidate is None:
        return None
    bench = result.bench
    return {"experiment": number, "description": description, "hypothesis": candidate.hypothesis,
            "source": candidate.kernel_source, "correctness": bench.correctness,
            "failed_stage": bench.failed_stage, "message": scrub(bench.message, paths.ROOT),   # saved in state.json
            "fix_turn": candidate.fix_turn if candidate.fix_of is not None else 0}
