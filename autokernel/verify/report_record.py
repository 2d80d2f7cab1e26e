"""verify's report as one record: what verification.verify builds, verify.py prints (verify_report.py), the
sandboxed child hands back on its pipe (isolated.py), and `autokernel score` reads from verify_report.json.
JSON only at the file and the pipe; the file's keys are the record's fields, so older readers read it unchanged.

The sections the router and the comparison describe in their own words (each kernel's hits and fallbacks, the
route table's rows, each variant's figures) stay JSON-shaped inside it: they are shown and stored, never computed
on. What is decided from the report is typed: the verdict, the error check, and the figures derived from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from autokernel.core.contracts import ContractError, check_keys


@dataclass
class Verdict:
    """Which path to use: PyTorch's best, or AutoKernel's best only where it is faster by more than the noise."""
    summary: str
    pytorch_best: dict | None           # {"variant", "name", "ms"}
    autokernel_best: dict | None
    speedup: float | None               # PyTorch's best / AutoKernel's best
    use: str                            # the variant to use: AutoKernel's best only when it is faster
    use_code: str
    faster: bool
    timings_meaningful: bool
    batch_norm_folding: bool            # the path to use runs with the model's batch norms folded (rewrites.py)
    linear_concat: bool = False         # ... with its linears that read one input run as one GEMM (rewrites.py)
    head_to_head: dict | None = None    # the two bests timed in turn, whose speedup this is (head_to_head.py)
    unchecked_routes: int = 0           # kernels whose routes verify's time limit left unchecked (selection.py)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class ErrorCheck:
    """The end-to-end error check: the model with every verified call routed, against its own output."""
    max_error: float
    variant_max_error: float | None    # the largest error among the AutoKernel variants that ran
    tolerance: float
    passed: bool
    definition: str                    # how the error is measured (routing/outputs.py ERROR_DEFINITION)
    # What the check ran (autokernel/verify/coverage.py); None in reports written before it was recorded.
    calls_checked: int | None = None   # the kernel calls routed in the checked forward pass
    not_checked: list[str] = field(default_factory=list)   # each kernel that took no call, and why

    @property
    def checked_nothing(self) -> bool:
        """No kernel call was routed: the output matched because only PyTorch ran, which proves nothing."""
        return self.calls_checked == 0


@dataclass
class VerifyReport:
    """One model verified: its kernels and their routes, the variants timed, the verdict, the error check."""
    model: str
    device: str
    device_name: str
    dtype: str
    inputs: list
    versions: dict                     # {"torch", "triton"}
    optimized_dir: str
    plan: str                          # where the kernels' shares came from, or why they are unknown
    replaced_share: float | None       # the profiled time the kernels routed by measurement cover
    kernels: list[dict]                # per kernel: its calls routed and fallen back in one forward, and its share
    checked: dict                      # the check with every kernel routed: the router's summary there
    route_table: list[dict]            # ours against PyTorch at each call signature
    variants: dict[str, dict]          # each variant's figures (variants.VariantResult's JSON)
    verdict: Verdict
    correctness: ErrorCheck
    tolerance: float
    timings_meaningful: bool
    selection: list[dict] = field(default_factory=list)   # the end-to-end trials of each mode's routes
    headroom: dict | None = None       # where torch.compile's forward spends its GPU time (on a GPU)
    overhead: dict | None = None       # with --overhead: the routing's own cost
    extra: dict = field(default_factory=dict)    # the router summary's other sections (module routes, folds, ...)
    dropped: list[dict] = field(default_factory=list)    # what failed and was left out (containment.Dropped's JSON)
    # The runs whose kernels were verified (their manifest entries' tags): the report shows this verdict only beside
    # those runs' rows. Empty for the starters, for PyTorch's paths alone and in reports written before it was kept.
    runs: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.correctness.passed

    @property
    def checked_nothing(self) -> bool:
        return self.correctness.checked_nothing

    @property
    def faster(self) -> bool:
        """AutoKernel's best beats PyTorch's best by more than the noise (never on CPU)."""
        return self.verdict.faster

    @property
    def speedup(self) -> float | None:
        """PyTorch's best over AutoKernel's best, where both were measured."""
        return self.verdict.speedup

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("verdict", "correctness",
                                                                                        "overhead", "extra")}
        data.update(verdict=self.verdict.to_json(), correctness=asdict(self.correctness))
        if self.overhead is not None:
            data["overhead"] = self.overhead
        return {**data, **self.extra}

    @classmethod
    def from_json(cls, data: dict) -> VerifyReport:
        """The report in data; ContractError says what is missing or malformed."""
        check_keys(cls, data)
        names = {f.name for f in fields(cls)}
        try:
            verdict, correctness = Verdict(**data["verdict"]), ErrorCheck(**data["correctness"])
        except TypeError as error:
            raise ContractError(f"a VerifyReport's verdict or error check is malformed ({error})") from error
        return cls(**{key: value for key, value in data.items() if key in names - {"verdict", "correctness", "extra"}},
                   verdict=verdict, correctness=correctness,
                   extra={key: value for key, value in data.items() if key not in names})

