"""The run is its state: workspace/state.json holds every setting and every decision `--resume` needs.

The records are in autokernel/core/run_records.py (RunSettings in autokernel/core/contracts.py):
  - RunSettings: what the user asked for (budget, agent, LLM model and base URL, the limits);
    `--resume` restores them, and a flag given with it overrides its setting, out loud;
  - JobProgress: where the loop stands on the current kernel (baseline, best, noise, history...); its
    results are JudgedResults, written as the bench's JSON with the policy's figures beside its fields;
  - RunState: the whole run: the jobs, the last kept commit, the numbering, tokens and cost, the
    built-in agent's search, where each job stands, and the two markers of a write sequence in progress:
      in_flight    a step (baseline, experiment, finish) has begun touching the tree;
      pending_row  a verdict is decided and saved, and its results.tsv row may not be written yet.
    A kill between any two writes leaves one of those markers, and resume completes or undoes the
    step (autokernel/search/session.py), so nothing is lost and no experiment number is used twice.
This module reads and writes the file: atomically (a temporary file, fsynced, then renamed).

Where each job stands: `job_index` is the first job in plan order not yet ended (finished, or
skipped because its starter fails), and `current` its progress once its baseline passed. With
several GPUs later jobs run side by side with it: `ahead` holds the progress of those started,
`ended_ahead` the names of those already ended. One GPU never fills them, so there the two
fields are the whole story, as they always were. The functions below read and move these.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autokernel.core import paths
from autokernel.core.run_records import JobProgress, RunState
from autokernel.core.errors import OptimizationError
from autokernel.search import results

STATE_FILE_NAME = "state.json"


def state_file() -> Path:
    return paths.WORKSPACE / STATE_FILE_NAME


class StateError(OptimizationError):
    """No state to resume, or one this version cannot read; the message says what to do."""


def save(state: RunState, path: Path | None = None) -> None:
    """Write atomically and durably: a kill leaves the previous state or this one, never half a file."""
    path = path or state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".json.tmp")
    with scratch.open("w") as handle:
        handle.write(json.dumps(state.to_json(), indent=2))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(scratch, path)


def load(path: Path | None = None) -> RunState:
    path = path or state_file()
    if not path.exists():
        raise StateError(f"nothing to resume: {path} does not exist")
    try:
        return RunState.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StateError(f"{path} is not a state file this version can resume ({exc}); "
                         f"move it aside to start a new run") from exc


def resumable() -> RunState | None:
    """The saved run when there is one to resume, else None."""
    try:
        state = load()
    except StateError:
        return None
    return None if state.done else state


def set_aside(state: RunState) -> Path:
    """Move an unfinished run's state to workspace/state.<tag>.json, out of a new run's way; its branch and its
    rows stay, and moving the file back to state.json resumes it."""
    aside = state_file().with_name(f"state.{state.tag}.json")
    os.replace(state_file(), aside)
    return aside


def settle_pending_row(state: RunState) -> None:
    """Write the decided row a kill may have kept from results.tsv (never twice), then forget it."""
    if state.pending_row is not None:
        results.ensure_row(paths.RESULTS_TSV, state.pending_row)
        state.pending_row = None


# ---------------------------------------------------------------------- where each job stands
def index_of(state: RunState, job) -> int:
    """The job's place in the plan (the loop holds the state's own Job records)."""
    return next(index for index, known in enumerate(state.jobs) if known is job)


def progress_of(state: RunState, index: int) -> JobProgress | None:
    """The job's progress once its baseline passed (None before, and after it ended)."""
    if index == state.job_index:
        return state.current
    return state.ahead.get(state.jobs[index].name) if index > state.job_index else None


def set_progress(state: RunState, index: int, progress: JobProgress) -> None:
    if index == state.job_index:
        state.current = progress
    else:
        state.ahead[state.jobs[index].name] = progress


def job_ended(state: RunState, index: int) -> bool:
    return index < state.job_index or state.jobs[index].name in state.ended_ahead


def open_jobs(state: RunState) -> list[tuple[int, JobProgress]]:
    """The jobs started and not ended (index, progress), in plan order."""
    indices = range(state.job_index, len(state.jobs))
    return [(index, progress) for index in indices if (progress := progress_of(state, index)) is not None]


def unfinished(state: RunState) -> int:
    """How many jobs have not ended yet."""
    return sum(not job_ended(state, index) for index in range(len(state.jobs)))


def end_job(state: RunState, index: int) -> None:
    """The job finished, or was skipped: job_index moves past it and every later job already ended,
    and `current` becomes the progress of the job it lands on, if that one was started side by side."""
    name = state.jobs[index].name
    state.ahead.pop(name, None)
    if index != state.job_index:
        state.ended_ahead.append(name)
        return
    state.current = None
    state.job_index += 1
    while state.job_index < len(state.jobs) and state.jobs[state.job_index].name in state.ended_ahead:
        state.ended_ahead.remove(state.jobs[state.job_index].name)
        state.job_index += 1
    if state.job_index < len(state.jobs):
        state.current = state.ahead.pop(state.jobs[state.job_index].name, None)
