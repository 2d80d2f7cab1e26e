"""The loop's bookkeeping writes: a verdict's row and state, a job's end, and the run's pace (a mixin of the loop).

`_record` makes a verdict's writes in their order (state, reset on a revert, results.tsv row,
state), `_save_best` a job's end (autokernel/loop.py's docstring gives both orders), and both the
one-GPU loop and the parallel one (autokernel/parallel_loop.py) use them, so a kill leaves the same
markers for resume to finish whichever ran. `_count_gpu` keeps the run's Throughput: per GPU, the
experiments judged there and the seconds it spent judging; `_save` the wall time beside them.
"""

from __future__ import annotations

import time

from autokernel import contracts, gitops, paths, plugin, policy, results, run_state
from autokernel.contracts import NO_GAIN, WINNER, Job, JobProgress
from autokernel.live import throughput_line
from autokernel.regions import store as region_store

HISTORY_KEPT = 50        # experiments of the current kernel remembered for the agent
# The run's stopping reasons: they end the run, not just the kernel; --resume goes on.
BUDGET_SPENT = "the run's time budget is spent"
COST_REACHED = "the run's cost cap is reached"
RUN_STOPS = (BUDGET_SPENT, COST_REACHED)


class LoopRecords:
    """The writes of OptimizationRun (autokernel/loop.py) that record what was decided."""

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

    def _account(self, tokens: int, cost: float | None) -> None:
        self.state.account(tokens, cost)
        self._status.llm_tokens, self._status.cost_usd = self.state.llm_tokens, self.state.cost_usd
        self._status.cost_complete = not self.state.cost_unknown_calls

    def _record(self, job: Job, progress: JobProgress | None, number: int, result: dict, description: str,
                status: str, started: float, *, tokens: int, cost: float | None, keep: bool,
                gpu: str) -> None:
        """The verdict's writes, in their order (inside a critical section): state, reset, row, state.
        gpu: where it was judged ("" when it was not: a malformed reply, a broken contract)."""
        state = self.state
        row = results.make_row(experiment=number, tag=state.tag, kernel_type=job.kernel_type, result=result,
                               description=description, status=status,
                               wall_seconds=round(time.monotonic() - started, 2), llm_tokens=tokens, cost_usd=cost,
                               gpu=gpu)
        state.pending_row, state.experiment, state.in_flight = row, number, None
        if status != contracts.STATUS_BASELINE and gpu:     # judged there (not a malformed reply, a contract)
            self._count_gpu(gpu, experiments=1)
        if progress is not None and status != contracts.STATUS_BASELINE:
            progress.experiments += 1
            progress.elapsed_s += self._job_time(job, started)
            progress.consecutive_reverts = 0 if keep else progress.consecutive_reverts + 1
            progress.last_result = result
            progress.history = (progress.history + [policy.history_entry(number, description, status, result)]
                                )[-HISTORY_KEPT:]
        if hasattr(self.agent, "state_dict"):
            state.agent_state = self.agent.state_dict()
        self._save()
        self.checkpoint("verdict saved")
        if not keep:
            self.repo.reset_hard(state.kept_commit)
            self.checkpoint("reverted")
        results.append_row(paths.RESULTS_TSV, row)
        self.checkpoint("row written")
        state.pending_row = None
        self._save()
        self.checkpoint("row settled")
        if status != contracts.STATUS_BASELINE:
            self._status.session_experiments += 1
            self._status.last_result = (policy.describe_verdict(number, status, result, description, progress)
                                        + self._verdict_note(job, gpu))
            self.view.log(self._status.last_result)
            self._refresh_status(progress)

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
        return self.repo.file_at(progress.kept[-1]["commit"], gitops.KERNEL_FILE_NAME)

    def _refresh_status(self, progress: JobProgress) -> None:
        self._status.gpus = throughput_line(self.state.throughput, time.monotonic() - self._wall_mark)
        self._status.show_job(self.state.experiment, progress, deadline=self.budget.deadline())
        self.view.update(self._status)

    def _save_best(self, job: Job, progress: JobProgress, reason: str) -> None:
        """Save the kept version (HEAD) as optimized_kernels/<rank>_<type>.py and commit it, if it is a
        winner: faster than PyTorch's best at one of the job's shapes (policy.is_winner). Otherwise the
        job ends as "no gain", with nothing saved for verify to route.

        A run-ending reason (budget, cost) saves the best so far and keeps the job open for --resume;
        any other ends the job.
        """
        name = job.name
        gain = progress.gain() or 1.0
        final = reason not in RUN_STOPS
        winner = policy.is_winner(progress.best)
        self.view.phase(f"saving {name}" if winner else f"ending {name}: no gain")
        with self.guard.critical():
            progress.finishing = reason
            self._save()
            self.checkpoint("finish: in flight")
            entry = {**plugin.manifest_entry(job, f"{name}.py"),
                     **policy.outcome(progress, reason, source_commit=progress.kept[-1]["commit"], tag=self.state.tag),
                     "verdict": WINNER if winner else NO_GAIN}
            if winner:
                paths.OPTIMIZED_DIR.mkdir(exist_ok=True)
                (paths.OPTIMIZED_DIR / f"{name}.py").write_bytes(self._kept_source(progress).encode())
                region_store.copy_to(job.kernel_type, paths.OPTIMIZED_DIR)     # a region's file goes with it
                kernels = plugin.read_manifest(paths.MANIFEST_FILE) if paths.MANIFEST_FILE.exists() else {}
                plugin.write_manifest(paths.MANIFEST_FILE, {**kernels, name: entry})
                self.checkpoint("finish: files written")
                self.state.kept_commit = self.repo.commit_optimized(
                    f"optimized {name}: {gain:.2f}x over its baseline" + ("" if final else " (so far)"), self.state.tag)
                self.checkpoint("finish: committed")
            progress.finishing = None
            if final:
                self.state.finished.append(entry)
                run_state.end_job(self.state, run_state.index_of(self.state, job))
            self._save()
            self.checkpoint("finish: saved")
        self.view.log(policy.describe_ending(name, progress, reason, final=final, winner=winner))
