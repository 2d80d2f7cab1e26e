"""The records the stages hand each other, and the words they judge with: one definition each.

    profile  -> optimization_plan.json  Plan (autokernel/core/plan.py), its entries PlanEntry
    extract  -> jobs.json, state.json    Job
    bench.py -> its JSON result          BenchResult (verdict: PASS, FAIL, CRASH or TIMEOUT)
    loop     -> its policy, the agents    JudgedResult: a BenchResult and the policy's figures; KeptVersion
    loop     -> results.tsv              status: baseline, keep or revert (autokernel/search/results.py writes rows)
    loop     -> manifest.json            ManifestEntry per kept kernel (verify adds its route table)
    loop     -> state.json               RunState (RunSettings, JobProgress, the jobs, Throughput: throughput.py;
                                         RunState and JobProgress are in autokernel/core/run_records.py)
    loop     -> a judge worker           JudgeTask, and back JudgeOutcome (autokernel/fleet/judge_worker.py)
Each has to_json and from_json. from_json checks what the record needs and says what is wrong
(ContractError, a ValueError); PlanEntry, BenchResult and ManifestEntry keep any other keys they
were read with in `extra` and write them back, so a newer writer's additions survive a round trip.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace

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


def titled(name: str, title: str) -> str:
    """A name as people read it: where a title says what it computes (a region's ops, its name a hash), the title
    first and the name after, "gemm+sigmoid+sum (region_3f9a0c1d2e)"; a name alone where there is none."""
    return f"{title} ({name})" if title else name


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
    title: str = ""              # what it computes, where its type's name does not say: a region's ops, gemm+sigmoid+sum

    @property
    def name(self) -> str:
        """The job's name in optimized_kernels/, the manifest and the log: <rank>_<type>."""
        return f"{self.rank}_{self.kernel_type}"

    @property
    def label(self) -> str:
        """The job as people read it: its name, or a region's ops first, "gemm+add (5_region_f151ae235609cea3)"."""
        return titled(self.name, self.title)

    @property
    def type_label(self) -> str:
        """Its kernel type as people read it: "rmsnorm", or a region's ops first, "gemm+add (region_f151...)"."""
        return titled(self.kernel_type, self.title)

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
    """bench.py's verdict on one kernel file and, on a PASS, its timings (docs/contracts.md lists its fields)."""
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


@dataclass
class JudgedResult:
    """A bench result as the loop holds it: bench.py's BenchResult (its timing rows given PyTorch's best beside
    ours, search/policy.against_pytorch_best) and the figures the loop's policy adds. Its JSON (state.json) is
    BenchResult's with those figures beside its fields, as the state has always held a result."""
    bench: BenchResult
    speedup_vs_best: float | None = None    # PyTorch's best (the faster of eager and torch.compile) over ours
    wins_at: list[str] | None = None        # the job's shapes where ours beats PyTorch's best by more than the noise

    FIGURES = ("speedup_vs_best", "wins_at")

    @property
    def passed(self) -> bool:
        return self.bench.passed

    @property
    def latency_us(self) -> float | None:
        return self.bench.latency_us

    def to_json(self) -> dict:
        figures = {name: getattr(self, name) for name in self.FIGURES if getattr(self, name) is not None}
        return {**self.bench.to_json(), **figures}

    @classmethod
    def from_json(cls, data: dict) -> JudgedResult:
        check_keys(BenchResult, data)
        bench = BenchResult.from_json({key: value for key, value in data.items() if key not in cls.FIGURES})
        return cls(bench, **{name: data[name] for name in cls.FIGURES if name in data})


@dataclass
class KeptVersion:
    """A kept version of a job's kernel: the commit that holds it and its judged result."""
    commit: str
    result: JudgedResult

    def to_json(self) -> dict:
        return {"commit": self.commit, "result": self.result.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> KeptVersion:
        check_keys(cls, data)
        return cls(commit=data["commit"], result=JudgedResult.from_json(data["result"]))


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


# The agents a run may ask for (--agent): "auto" picks by which API key is set (autokernel/agents/factory.py).
AGENT_KINDS = ("auto", "anthropic", "openai", "builtin")


@dataclass(frozen=True)
class RunSettings:
    """Everything the user chose for a run; the CLI's flags map one to one (FLAGS); `agent` is one of AGENT_KINDS."""
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
    # The job's best latency and noise: a final PASS the loop would keep by them (policy.is_improvement) is run in a
    # user's process before it comes back (autokernel/judge/user_check.py). None for a baseline.
    best_us: float | None = None
    noise: float | None = None
    # That check's time limit (None: its own ceiling, user_check.TIMEOUT_S): the loop cuts it to the budget left.
    check_timeout_s: float | None = None

    to_json = asdict

    @classmethod
    def from_json(cls, data: dict) -> JudgeTask:
        check_keys(cls, data)
        return cls(**data)


@dataclass
class JudgeOutcome:
    """A worker's answer: bench.py's result, the GPU it ran on, how long each bench took. On the wire (the
    worker's pipe, Ray) it is JSON, the result BenchResult's."""
    result: BenchResult
    gpu: str
    seconds: float                               # the worker's time on it, every bench included
    bench_seconds: dict[str, float] = field(default_factory=dict)   # "quick", "full": each bench that ran
    check_seconds: float | None = None           # the user's-process check's time, where one ran to a verdict

    def to_json(self) -> dict:
        return {"result": self.result.to_json(), "gpu": self.gpu, "seconds": self.seconds,
                "bench_seconds": dict(self.bench_seconds), "check_seconds": self.check_seconds}

    @classmethod
    def from_json(cls, data: dict) -> JudgeOutcome:
        check_keys(cls, data)
        return cls(**{**data, "result": BenchResult.from_json(data["result"])})
