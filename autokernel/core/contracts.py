"""The records the stages hand each other, and the words they judge with: one definition each.

    profile  -> optimization_plan.json  Plan (autokernel/core/plan.py), its entries PlanEntry
    extract  -> jobs.json, state.json    Job
    bench.py -> its JSON result          BenchResult (verdict: PASS, FAIL, CRASH or TIMEOUT)
    loop     -> results.tsv              status: baseline, keep or revert (autokernel/search/results.py writes rows)
    loop     -> manifest.json            ManifestEntry per kept kernel (verify adds its route table)
    loop     -> state.json               RunState (RunSettings, JobProgress, the jobs, Throughput: throughput.py)
    loop     -> a judge worker           JudgeTask, and back JudgeOutcome (autokernel/fleet/judge_worker.py)
Each has to_json and from_json. from_json checks what the record needs and says what is wrong
(ContractError, a ValueError); PlanEntry, BenchResult and ManifestEntry keep any other keys they
were read with in `extra` and write them back, so a newer writer's additions survive a round trip.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from autokernel.core.throughput import GpuUse, JobSpan, Throughput  # noqa: F401 (records of the state, defined apart)

# bench.py's verdicts (its exit codes, in this order: 0, 1, 2, 3).
PASS, FAIL, CRASH, TIMEOUT = "PASS", "FAIL", "CRASH", "TIMEOUT"
VERDICTS = (PASS, FAIL, CRASH, TIMEOUT)
# What the loop did with an experiment: results.tsv's status column.
STATUS_BASELINE, STATUS_KEEP, STATUS_REVERT = "baseline", "keep", "revert"
# How a finished job ended, in the manifest and the state: faster than PyTorch's best at one of its shapes
# at least, or at none; or, without meaningful timings (the CPU interpreter), correct and no more is known.
WINNER, NO_GAIN = "winner", "no gain"
SPEED_UNKNOWN = "correct; speed unknown on CPU"


class ContractError(ValueError):
    """A record read from JSON lacks a field it needs or has a wrong value; the message says which."""


def _required(cls) -> list[str]:
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def check_keys(cls, data) -> None:
    """ContractError unless data is a JSON object holding every field of the dataclass cls that has no default."""
    if not isinstance(data, dict):
        raise ContractError(f"a {cls.__name__} is a JSON object, got {type(data).__name__}")
    missing = [name for name in _required(cls) if name not in data]
    if missing:
        raise ContractError(f"a {cls.__name__} needs {', '.join(missing)}; got {', '.join(sorted(data)) or 'nothing'}")


class _OpenRecord:
    """A record whose JSON may carry keys beyond its fields: they are kept in `extra`, and written back."""

    def to_json(self) -> dict:
        data = asdict(self)
        extra = data.pop("extra")
        return {**data, **extra}

    @classmethod
    def from_json(cls, data: dict):
        check_keys(cls, data)
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{key: value for key, value in data.items() if key in known},
                   extra={key: value for key, value in data.items() if key not in known})


# ---------------------------------------------------------------------- profile and extract
@dataclass
class PlanEntry(_OpenRecord):
    """One kernel type of the optimization plan: its measured time, Amdahl figure and shapes (most time first)."""
    rank: int
    kernel_type: str
    dtype: str
    shapes: list[dict]
    share: float
    amdahl_2x: float
    time_ms: float = 0.0
    calls: float = 0.0
    shape_times_ms: list[float] = field(default_factory=list)
    bound: str | None = None
    throughput: str | None = None
    pct_peak: float | None = None
    module_paths: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


@dataclass
class Job:
    """One kernel job: a starter stamped with the model's shapes (workspace/kernel_<rank>_<type>.py), and the
    exact bench.py arguments that check and time it at those shapes."""
    rank: int
    kernel_type: str
    dtype: str
    shapes: list[dict]
    path: str
    model: str = "unknown"
    shape_args: list[str] = field(default_factory=list)
    bench_args: list[str] = field(default_factory=list)
    share: float = 0.0
    amdahl_2x: float = 1.0
    backend: str = "triton"      # the starter's language: "triton", "cuda" or "any" (paths.BACKENDS)

    @property
    def name(self) -> str:
        """The job's name in optimized_kernels/, the manifest and the log: <rank>_<type>."""
        return f"{self.rank}_{self.kernel_type}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Job:
        check_keys(cls, data)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ContractError(f"a Job has no {', '.join(unknown)}")
        return cls(**data)


# ---------------------------------------------------------------------- the judge
@dataclass
class BenchResult(_OpenRecord):
    """bench.py's verdict on one kernel file and, on a PASS, its timings (docs/architecture.md lists the fields)."""
    correctness: str
    kernel_type: str | None = None
    failed_stage: str | None = None
    message: str | None = None
    seed: int | None = None
    device: str | None = None
    dtype: str | None = None
    timings_meaningful: bool = False
    stages: list[dict] = field(default_factory=list)
    timing_shapes: list[str] = field(default_factory=list)
    wall_seconds: float | None = None
    load_seconds: float | None = None           # the worker's import of the kernel file
    timing_seconds: float | None = None         # the timing stage (a PASS only)
    throughput: float | None = None
    throughput_unit: str | None = None
    latency_us: float | None = None
    call_latency_us: float | None = None
    pct_peak: float | None = None
    bound: str | None = None
    speedup_vs_pytorch: float | None = None
    speedup_vs_compile: float | None = None
    pytorch_latency_us: float | None = None
    compile_latency_us: float | None = None
    peak_vram_mb: float | None = None
    speed_of_light: dict | None = None
    compiled: dict | None = None
    launch_floor_us: float | None = None        # the GPU time of the smallest launch (timing.launch_floor_ms)
    limits: dict | None = None
    timings: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.correctness not in VERDICTS:
            raise ContractError(f"a bench result's correctness is one of {', '.join(VERDICTS)}, "
                                f"got {self.correctness!r}")

    @property
    def passed(self) -> bool:
        return self.correctness == PASS


# ---------------------------------------------------------------------- the manifest
@dataclass
class ManifestEntry(_OpenRecord):
    """One kept kernel in optimized_kernels/manifest.json: its file, where bench.py verified it, and (extra)
    the loop's own figures and, once verify has run on a GPU, its route table."""
    file: str
    kernel_type: str
    rank: int
    shapes: list[dict]
    dtypes: list[str]
    extra: dict = field(default_factory=dict)

    @classmethod
    def for_job(cls, job: Job | PlanEntry, file: str, **figures) -> ManifestEntry:
        """The entry for a job's kernel (or a plan entry's starter), verified at its shapes in its dtype."""
        return cls(file=str(file), kernel_type=job.kernel_type, rank=job.rank, shapes=list(job.shapes),
                   dtypes=[job.dtype], extra=figures)


# ---------------------------------------------------------------------- the run's state
def _every_visible_gpu() -> str:
    """--gpus left to its default, as it is on this machine (torch imported only here: `report` stays light)."""
    import torch

    count = torch.cuda.device_count()
    return f"every visible GPU ({count})" if count else "1 (no GPU here: one judge in Triton's interpreter)"


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
    gpus: int | None = None                     # judge workers, one per GPU (None: every visible GPU)
    ray: str | None = None                      # "auto" or a Ray cluster's address: the workers run there
    reasoning: str | None = None                # the LLM's reasoning level: low, medium, high (None: its default)
    max_malformed: int = 3                      # a job ends after this many unreadable replies in a row

    FLAGS = {"budget_s": "--budget", "experiment_timeout_s": "--experiment-timeout", "max_consecutive_reverts":
             "--max-reverts", "peak_fraction_target": "--peak-target", "kernel_time_s": "--kernel-budget",
             "target_speedup": "--target-speedup", "noise_floor": "--noise-floor", "quick_bench": "--quick",
             "max_cost_usd": "--max-cost", "agent": "--agent", "llm_model": "--llm-model", "base_url": "--base-url",
             "gpus": "--gpus", "ray": "--ray", "reasoning": "--reasoning", "max_malformed": "--max-malformed"}

    def show(self, name: str) -> str:
        from autokernel.core.live import format_duration

        value = getattr(self, name)
        if value is None and name == "gpus":
            return _every_visible_gpu()
        if value is None:
            return "the model's default" if name == "reasoning" else "none"
        if name in ("budget_s", "experiment_timeout_s", "kernel_time_s"):
            return format_duration(value)
        if name == "max_cost_usd":
            return f"${value:.2f}"
        return str(value)

    def describe(self) -> str:
        agent = self.agent + (f" {self.llm_model}" if self.llm_model else "") + (f" at {self.base_url}"
                                                                               if self.base_url else "")
        parts = [f"agent {agent}", f"budget {self.show('budget_s')}"]
        parts += [f"{self.FLAGS[name]} {self.show(name)}" for name in
                  ("experiment_timeout_s", "max_consecutive_reverts", "max_malformed", "kernel_time_s",
                   "target_speedup", "peak_fraction_target", "noise_floor", "max_cost_usd")]
        parts += [f"--reasoning {self.reasoning}"] if self.reasoning else []
        parts += [f"--gpus {self.show('gpus')}"] + ([f"--ray {self.ray}"] if self.ray else [])
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
        return cls(**data)      # a state saved before a setting existed gets its default


@dataclass
class JudgeTask:
    """One candidate for a judge worker: the whole kernel file and bench.py's arguments. It carries no
    secret and no path of the orchestrator's but the judge's (bench_script, used where it exists)."""
    kernel_source: str
    kernel_type: str
    shapes: list[dict]
    dtype: str
    timeout_s: float
    seed: int
    extra_args: list[str] = field(default_factory=list)
    full_timeout_s: float | None = None         # after a screen: the full judge, if the screen beat full_below_us
    full_below_us: float | None = None
    bench_script: str | None = None

    to_json = asdict

    @classmethod
    def from_json(cls, data: dict) -> JudgeTask:
        check_keys(cls, data)
        return cls(**data)


@dataclass
class JudgeOutcome:
    """A worker's answer: bench.py's result (BenchResult's JSON), the GPU it ran on, how long each bench took."""
    result: dict
    gpu: str
    seconds: float                               # the worker's time on it, every bench included
    bench_seconds: dict[str, float] = field(default_factory=dict)   # "quick", "full": each bench that ran
    to_json = asdict

    @classmethod
    def from_json(cls, data: dict) -> JudgeOutcome:
        check_keys(cls, data)
        BenchResult.from_json(data["result"])
        return cls(**data)


@dataclass
class JobProgress:
    """Where the loop stands on the current kernel job."""
    baseline: dict
    best: dict
    noise: float
    experiments: int = 0
    consecutive_reverts: int = 0
    elapsed_s: float = 0.0            # its own wall time: its experiments' spans, overlapping ones counted once
    last_result: dict | None = None
    history: list[dict] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)    # {"commit", "result"} per kept version, baseline first
    bench_seconds: dict[str, float] = field(default_factory=dict)   # "quick"/"full": the longest clean bench;
    #                                                                  "cold": the first, compiling every shape
    finishing: str | None = None      # set while the job's best is being saved: the reason it stopped
    compile_us: dict[str, float] = field(default_factory=dict)   # torch.compile's call time per shape (baseline)
    older: list[dict] = field(default_factory=list)   # experiments that left `history`, one summary line each
    failure: dict | None = None       # the last verdict, when it failed a candidate: shown, and fixable, next turn
    queued: list[dict] = field(default_factory=list)  # candidates of a reply waiting to be judged (Proposal fields)
    malformed_in_a_row: int = 0       # unreadable replies since the last readable one (--max-malformed)

    def gain(self) -> float | None:
        """Baseline latency over best latency: how much faster the best version is."""
        base, best = self.baseline.get("latency_us"), self.best.get("latency_us")
        return base / best if base and best else None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> JobProgress:
        return cls(**data)


STATE_VERSION = 2


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
    throughput: Throughput = field(default_factory=Throughput)
    # With several GPUs, jobs after job_index run side by side with it (autokernel/search/run_state.py reads these):
    ahead: dict[str, JobProgress] = field(default_factory=dict)    # started ones, by job name
    ended_ahead: list[str] = field(default_factory=list)           # finished or skipped ones
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
        throughput = Throughput.from_json(data.pop("throughput", None) or {})   # absent in older states
        ahead = {name: JobProgress.from_json(progress) for name, progress in (data.pop("ahead", None) or {}).items()}
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
