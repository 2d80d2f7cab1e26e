"""The run's state as --resume needs it (workspace/state.json): RunState, and JobProgress per kernel job.

autokernel/search/run_state.py reads and writes the file; the records they hold (Job, RunSettings, JudgedResult,
KeptVersion, Throughput) are the contracts' (autokernel/core/contracts.py). JSON only at the file.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import asdict, dataclass, field, fields

from autokernel.core.contracts import Job, JudgedResult, KeptVersion, RunSettings
from autokernel.core.throughput import Throughput


@dataclass
class JobProgress:
    """Where the loop stands on the current kernel job."""
    baseline: JudgedResult
    best: JudgedResult
    noise: float
    experiments: int = 0
    consecutive_reverts: int = 0
    elapsed_s: float = 0.0            # its own wall time: its experiments' spans, overlapping ones counted once
    last_result: JudgedResult | None = None
    history: list[dict] = field(default_factory=list)   # what the agent is shown of each (policy.history_entry)
    kept: list[KeptVersion] = field(default_factory=list)    # per kept version, baseline first
    bench_seconds: dict[str, float] = field(default_factory=dict)   # "quick"/"full": the longest clean bench;
    #                     "cold": the first, compiling every shape; "baseline": the other (both in the job's dtype)
    finishing: str | None = None      # set while the job's best is being saved: the reason it stopped
    compile_us: dict[str, float] = field(default_factory=dict)   # torch.compile's call time per shape (baseline)
    older: list[dict] = field(default_factory=list)   # experiments that left `history`, one summary line each
    failure: dict | None = None       # the last verdict, when it failed a candidate: shown, and fixable, next turn
    queued: list[dict] = field(default_factory=list)  # candidates of a reply waiting to be judged (Proposal fields)
    malformed_in_a_row: int = 0       # unreadable replies since the last readable one (--max-malformed)

    def gain(self) -> float | None:
        """Baseline latency over best latency: how much faster the best version is."""
        base, best = self.baseline.latency_us, self.best.latency_us
        return base / best if base and best else None

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return deepcopy({**data, "baseline": self.baseline.to_json(), "best": self.best.to_json(),
                         "last_result": self.last_result.to_json() if self.last_result else None,
                         "kept": [version.to_json() for version in self.kept]})

    @classmethod
    def from_json(cls, data: dict) -> JobProgress:
        """The progress as state.json holds it: its results as BenchResult's JSON with the policy's figures beside."""
        last = data.get("last_result")
        return cls(**{**data, "baseline": JudgedResult.from_json(data["baseline"]),
                      "best": JudgedResult.from_json(data["best"]),
                      "last_result": JudgedResult.from_json(last) if last is not None else None,
                      "kept": [KeptVersion.from_json(version) for version in data.get("kept") or []]})


STATE_VERSION = 2

# What the run's time went to (RunState.spent_s): profiling the model and making its starters (the regions'
# autotuning among them), then the baselines' benches and the experiments (each from the agent's ask to its verdict).
PROFILING, BASELINES, EXPERIMENTS = "profiling", "baselines", "experiments"


@dataclass
class RunState:
    """Everything --resume needs, saved as workspace/state.json (autokernel/search/run_state.py reads and writes it)."""
    tag: str
    jobs: list[Job]
    kept_commit: str                 # the tree returns here on every revert and after an interruption
    settings: RunSettings
    return_to: str | None = None     # the branch (or commit) the user started from
    job_index: int = 0
    experiment: int = 0              # the last experiment number given a results.tsv row
    elapsed_s: float = 0.0
    llm_tokens: int = 0
    llm_cached_tokens: int = 0       # of llm_tokens: input read from the provider's prompt cache
    llm_reasoning_tokens: int = 0    # of llm_tokens: reasoning or thinking output
    cost_usd: float = 0.0
    cost_unknown_calls: int = 0      # calls to a model without a price: cost_usd leaves them out
    current: JobProgress | None = None
    finished: list[dict] = field(default_factory=list)
    done: bool = False
    stopped_because: str | None = None
    in_flight: dict | None = None    # {"step": "baseline"|"experiment"|"finish", "number": N}
    pending_row: dict | None = None  # a decided results.tsv row that may not be written yet
    agent_state: dict | None = None  # the built-in agent's search, so a resumed run never repeats a configuration
    # The model as the run was given it, for `autokernel verify` with no model (autokernel/verify/run_model.py):
    # {"flags": verify.py's model flags, "inputs": the profiled inputs' shapes and dtypes}; None when the run was
    # given a model object (autokernel.optimize).
    model: dict | None = None
    throughput: Throughput = field(default_factory=Throughput)
    # With several GPUs, jobs after job_index run side by side with it (autokernel/search/run_state.py reads these):
    ahead: dict[str, JobProgress] = field(default_factory=dict)    # started ones, by job name
    ended_ahead: list[str] = field(default_factory=list)           # finished or skipped ones
    spent_s: dict[str, float] = field(default_factory=dict)        # seconds by PROFILING, BASELINES, EXPERIMENTS
    plan_caveats: list[str] = field(default_factory=list)          # the plan's (core/plan.py): on a CPU, noisy...
    version: int = STATE_VERSION

    def to_json(self) -> dict:
        data = asdict(self)
        data.update(jobs=[job.to_json() for job in self.jobs], settings=self.settings.to_json(),
                    current=self.current.to_json() if self.current else None, throughput=self.throughput.to_json(),
                    ahead={name: progress.to_json() for name, progress in self.ahead.items()})
        return data

    @classmethod
    def from_json(cls, data: dict) -> RunState:
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"state version {data.get('version')!r}, this AutoKernel writes {STATE_VERSION}")
        data = dict(data)
        settings = RunSettings.from_json(data.pop("settings"))
        current = data.pop("current")
        jobs = [Job.from_json(job) for job in data.pop("jobs")]
        throughput = Throughput.from_json(data.pop("throughput"))
        ahead = {name: JobProgress.from_json(progress) for name, progress in data.pop("ahead").items()}
        return cls(**data, jobs=jobs, settings=settings, current=JobProgress.from_json(current) if current else None,
                   throughput=throughput, ahead=ahead)

    def job(self) -> Job:
        return self.jobs[self.job_index]

    def account(self, tokens: int, cost: float | None, *, cached: int = 0, reasoning: int = 0) -> None:
        """Count an LLM call's tokens (cached and reasoning ones also apart) and cost (None: a model without a
        known price)."""
        self.llm_tokens += tokens
        self.llm_cached_tokens += cached
        self.llm_reasoning_tokens += reasoning
        self.cost_usd += cost or 0.0
        self.cost_unknown_calls += int(cost is None and tokens > 0)
