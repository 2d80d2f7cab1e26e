"""The run is its state: workspace/state.json holds every setting and every decision `--resume` needs.

Three typed records, each with to_json/from_json:
  - RunSettings: what the user asked for (budget, agent, LLM model and base URL, the limits);
    `--resume` restores them, and a flag given with it overrides its setting, out loud;
  - JobProgress: where the loop stands on the current kernel (baseline, best, noise, history...);
  - RunState: the whole run: the jobs, the last kept commit, the numbering, tokens and cost, the
    built-in agent's search, and the two markers of a write sequence in progress:
      in_flight    a step (baseline, experiment, finish) has begun touching the tree;
      pending_row  a verdict is decided and saved, and its results.tsv row may not be written yet.
    A kill between any two writes leaves one of those markers, and resume completes or undoes the
    step (autokernel/session.py), so nothing is lost and no experiment number is used twice.
The file is written atomically (a temporary file, fsynced, then renamed).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from autokernel import paths

STATE_VERSION = 2
STATE_FILE_NAME = "state.json"


def state_file() -> Path:
    return paths.WORKSPACE / STATE_FILE_NAME


class OptimizationError(Exception):
    """A run cannot start, resume or go on; the message says why and what to do."""


class StateError(OptimizationError):
    """No state to resume, or one this version cannot read; the message says what to do."""


def _duration(seconds: float | None) -> str:
    from autokernel.live import format_duration

    return format_duration(seconds)


@dataclass(frozen=True)
class RunSettings:
    """Everything the user chose for a run; the CLI's flags map one to one (FLAGS)."""
    budget_s: float = 8 * 3600
    experiment_timeout_s: float = 900           # one bench run; bench.py's stage limits usually fire first
    max_consecutive_reverts: int = 5
    peak_fraction_target: float = 0.9
    kernel_time_s: float = 2 * 3600
    target_speedup: float = 2.0
    noise_floor: float = 0.02
    quick_bench: bool = False                   # bench.py --quick for every run (always on without a GPU)
    max_cost_usd: float | None = None
    agent: str = "auto"                         # after the agent is made: "anthropic", "openai" or "builtin"
    llm_model: str | None = None
    base_url: str | None = None

    FLAGS = {"budget_s": "--budget", "experiment_timeout_s": "--experiment-timeout", "max_consecutive_reverts":
             "--max-reverts", "peak_fraction_target": "--peak-target", "kernel_time_s": "--kernel-budget",
             "target_speedup": "--target-speedup", "noise_floor": "--noise-floor", "quick_bench": "--quick",
             "max_cost_usd": "--max-cost", "agent": "--agent", "llm_model": "--llm-model", "base_url": "--base-url"}

    def show(self, name: str) -> str:
        value = getattr(self, name)
        if value is None:
            return "none"
        if name in ("budget_s", "experiment_timeout_s", "kernel_time_s"):
            return _duration(value)
        if name == "max_cost_usd":
            return f"${value:.2f}"
        return str(value)

    def describe(self) -> str:
        agent = self.agent + (f" {self.llm_model}" if self.llm_model else "") + (f" at {self.base_url}"
                                                                               if self.base_url else "")
        parts = [f"agent {agent}", f"budget {self.show('budget_s')}"]
        parts += [f"{self.FLAGS[name]} {self.show(name)}" for name in
                  ("experiment_timeout_s", "max_consecutive_reverts", "kernel_time_s", "target_speedup",
                   "peak_fraction_target", "noise_floor", "max_cost_usd")]
        return ", ".join(parts) + (", --quick" if self.quick_bench else "")

    def overridden(self, changes: dict) -> tuple[RunSettings, list[str]]:
        """These settings with `changes` applied, and one line per setting that really changed."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}")
        updated = replace(self, **changes)
        notes = [f"{self.FLAGS[name]} {updated.show(name)} overrides the run's {self.show(name)}"
                 for name in changes if getattr(self, name) != getattr(updated, name)]
        return updated, notes

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RunSettings:
        return cls(**data)


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
    bench_seconds: dict[str, float] = field(default_factory=dict)   # "quick"/"full": the longest clean bench;
    #                                                                  "cold": the first, compiling every shape
    finishing: str | None = None      # set while the job's best is being saved: the reason it stopped
    compile_us: dict[str, float] = field(default_factory=dict)   # torch.compile's call time per shape (baseline)

    def gain(self) -> float | None:
        """Baseline latency over best latency: how much faster the best version is."""
        base, best = self.baseline.get("latency_us"), self.best.get("latency_us")
        return base / best if base and best else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> JobProgress:
        return cls(**data)


@dataclass
class RunState:
    """Everything --resume needs, saved as workspace/state.json."""
    tag: str
    jobs: list[dict]
    kept_commit: str                 # the tree returns here on every revert and after an interruption
    settings: RunSettings
    return_to: str | None = None     # the branch (or commit) the user started from
    job_index: int = 0
    experiment: int = 0              # the last experiment number given a results.tsv row
    elapsed_s: float = 0.0
    llm_tokens: int = 0
    cost_usd: float = 0.0
    cost_unknown_calls: int = 0      # calls to a model without a price: cost_usd leaves them out
    current: JobProgress | None = None
    finished: list[dict] = field(default_factory=list)
    done: bool = False
    stopped_because: str | None = None
    in_flight: dict | None = None    # {"step": "baseline"|"experiment"|"finish", "number": N}
    pending_row: dict | None = None  # a decided results.tsv row that may not be written yet
    agent_state: dict | None = None  # the built-in agent's search, so a resumed run never repeats a configuration
    version: int = STATE_VERSION

    def to_json(self) -> dict:
        data = asdict(self)
        data["settings"] = self.settings.to_json()
        data["current"] = self.current.to_json() if self.current else None
        return data

    @classmethod
    def from_json(cls, data: dict) -> RunState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state version {data.get('version')!r}, this AutoKernel writes {STATE_VERSION}")
        data = dict(data)
        settings = RunSettings.from_json(data.pop("settings"))
        current = data.pop("current")
        return cls(**data, settings=settings, current=JobProgress.from_json(current) if current else None)

    def save(self, path: Path | None = None) -> None:
        """Write atomically and durably: a kill leaves the previous state or this one, never half a file."""
        path = path or state_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".json.tmp")
        with scratch.open("w") as handle:
            handle.write(json.dumps(self.to_json(), indent=2))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(scratch, path)

    @classmethod
    def load(cls, path: Path | None = None) -> RunState:
        path = path or state_file()
        if not path.exists():
            raise StateError(f"nothing to resume: {path} does not exist")
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StateError(f"{path} is not a state file this version can resume ({exc}); "
                             f"move it aside to start a new run") from exc

    def job(self) -> dict:
        return self.jobs[self.job_index]


def resumable() -> RunState | None:
    """The saved run when there is one to resume, else None."""
    try:
        state = RunState.load()
    except StateError:
        return None
    return None if state.done else state
