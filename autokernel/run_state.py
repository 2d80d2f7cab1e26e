"""The run is its state: workspace/state.json holds every setting and every decision `--resume` needs.

The records are in autokernel/contracts.py:
  - RunSettings: what the user asked for (budget, agent, LLM model and base URL, the limits);
    `--resume` restores them, and a flag given with it overrides its setting, out loud;
  - JobProgress: where the loop stands on the current kernel (baseline, best, noise, history...);
  - RunState: the whole run: the jobs, the last kept commit, the numbering, tokens and cost, the
    built-in agent's search, and the two markers of a write sequence in progress:
      in_flight    a step (baseline, experiment, finish) has begun touching the tree;
      pending_row  a verdict is decided and saved, and its results.tsv row may not be written yet.
    A kill between any two writes leaves one of those markers, and resume completes or undoes the
    step (autokernel/session.py), so nothing is lost and no experiment number is used twice.
This module reads and writes the file: atomically (a temporary file, fsynced, then renamed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autokernel import paths, results
from autokernel.contracts import RunState

STATE_FILE_NAME = "state.json"


def state_file() -> Path:
    return paths.WORKSPACE / STATE_FILE_NAME


class OptimizationError(Exception):
    """A run cannot start, resume or go on; the message says why and what to do."""


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


def settle_pending_row(state: RunState) -> None:
    """Write the decided row a kill may have kept from results.tsv (never twice), then forget it."""
    if state.pending_row is not None:
        results.ensure_row(paths.RESULTS_TSV, state.pending_row)
        state.pending_row = None
