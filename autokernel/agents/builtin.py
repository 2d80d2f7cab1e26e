"""The built-in agent: offline coordinate descent over the TUNABLES a kernel declares, no API key needed.

Structural moves come first: for a GEMM kernel (one that declares `engine_plan` and `engine_split_k` tunables),
autokernel/agents/gemm_moves.py ranks tile and split-K changes by a cost model of the job's shapes (waves of
work units over the GPU's SMs, bytes moved, partials) and the search measures the best few (at most four),
each one proposal whose description is the model's line ("split-K 8 at 64x2048x2048 ...: 0.12 waves -> 0.97
(wave efficiency 12% -> 97%) ..."), before any single knob is turned. The moves are fixed when the job's
search starts and kept in its state; one the search has already measured is never proposed again.

Then, starting from the best configuration so far (the kernel's current TUNABLES when no move won), it
tries the neighbouring values (in TUNABLE_CHOICES order; every value of a whole-plan tunable, which has no
order) of one tunable at a time (and a tile side that grows together with its bucket's warps, one
step up: alone, a wider tile often spills), walking the tunables in the order autokernel/agents/axis_order.py
gives: those that act on what limits the kernel first (memory or compute, by the roofline of the
judge's summary of the baseline), and, for a kernel planned by shape bucket, the buckets the job's
shapes use first. The order is fixed when a job's search starts and kept in its state, so a
resumed run walks on as it would have. While a tunable improves the score it keeps walking along
it; when neither neighbour of the best value helps it moves to the next tunable; when a whole
round over every tunable improves nothing, the search has converged and it raises SearchExhausted. A proposal
rewrites the TUNABLES literal and nothing else. The score of an experiment is the throughput of a
PASS (or its negated latency when there is no throughput); anything else is a dead end. It never
proposes a configuration twice, and the same results always lead to the same proposals. Its
searches (every configuration tried, with its score) go into the run's state (`state_dict`), so a
resumed run does not try them again. With several GPUs it proposes while other configurations are
being judged: the next untried neighbour, else the next tunable's (several directions at once);
it learns each verdict through `judged`, and waits (WaitForResults) when only their results can
say what comes next.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from autokernel.agents import axis_order, gemm_moves
from autokernel.agents.base import Agent, AgentContext, Proposal, SearchExhausted, WaitForResults
from autokernel.agents.tunables import format_literal, read_tunables, rewrite_tunables
from autokernel.core.contracts import PASS, BenchResult


def score(result: BenchResult | None) -> float | None:
    """Higher is better: a PASS's throughput, else its negated latency; None for a failure or no timing."""
    return None if result is None else _score(result.correctness, result.throughput, result.latency_us)


def _score(correctness: str | None, throughput: float | None, latency_us: float | None) -> float | None:
    if correctness != PASS:
        return None
    if throughput is not None:
        return float(throughput)
    if latency_us is not None:
        return -float(latency_us)
    return None


def config_key(config: dict) -> str:
    return format_literal(dict(sorted(config.items())))


def neighbours(choices: list, value) -> list:
    """The choices next to `value`; all of them when `value` is not among the choices."""
    if value not in choices:
        return list(choices)
    index = choices.index(value)
    return choices[max(index - 1, 0):index] + choices[index + 1:index + 2]


@dataclass
class CoordinateSearch:
    """The search state of one kernel job."""
    choices: dict[str, list]                    # the tunables searched, in declaration order
    best: dict
    best_score: float | None
    scores: dict[str, float | None] = field(default_factory=dict)   # every configuration seen, by config_key
    axis: int = 0                               # index of the tunable being walked
    stale_axes: int = 0                         # tunables in a row that brought no improvement
    pending: dict | None = None                 # proposed, outcome not yet seen
    pending_description: str = ""
    order: list[str] = field(default_factory=list)  # the tunables in walking order (empty: declaration order)
    bound: str | None = None                    # the roofline bound the order was chosen for
    buckets: list[str] | None = None            # the shape buckets the job's shapes use, where planned by bucket
    waiting: list[dict] = field(default_factory=list)   # with several GPUs: configurations being judged now
    moves: list[dict] = field(default_factory=list)     # structural moves measured first: {"description", "config"}

    def record(self, outcome: float | None, config: dict | None = None) -> None:
        """Learns the outcome (its score) of the pending proposal (or of `config`, one of those being judged)."""
        config = self.pending if config is None else config
        self.scores[config_key(config)] = outcome
        if outcome is not None and (self.best_score is None or outcome > self.best_score):
            self.best, self.best_score, self.stale_axes = config, outcome, 0
        if config is self.pending:
            self.pending = None
        self.waiting = [entry for entry in self.waiting if config_key(entry) != config_key(config)]

    def forget_waiting(self) -> None:
        """A resumed run: the candidates that were being judged never came back, so they may be tried again."""
        for config in self.waiting:
            if self.scores.get(config_key(config), 0) is None:
                del self.scores[config_key(config)]
        self.waiting = []

    def next_move(self) -> dict | None:
        """The first structural move not yet tried (a move the descent reached first is not tried again)."""
        return next((move for move in self.moves if config_key(move["config"]) not in self.scores), None)

    def next_config(self) -> dict | None:
        """The next untried configuration, or None once a full round over the tunables improved nothing."""
        axes = self.order or list(self.choices)
        while self.stale_axes < len(axes):
            name = axes[self.axis]
            for candidate in self._moves_along(name):
                if config_key(candidate) not in self.scores:
                    return candidate
            self.axis = (self.axis + 1) % len(axes)
            self.stale_axes += 1
        return None

    def _moves_along(self, name: str) -> list[dict]:
        """One step each way along `name`; a tile side that grows is also tried with its bucket's next warps up.
        A whole plan (kind "plan": the GEMM engine's plans, gate_up) has no order to step along: every
        other choice is a move, in the declared order."""
        moves = []
        warps = axis_order.paired_warps(name, list(self.choices))
        if axis_order.kind_of(name) == "plan":
            return [{**self.best, name: value} for value in self.choices[name] if value != self.best[name]]
        for value in neighbours(self.choices[name], self.best[name]):
            moves.append({**self.best, name: value})
            grows = self._rank(name, value) > self._rank(name, self.best[name])
            more_warps = [w for w in neighbours(self.choices[warps], self.best[warps])
                          if self._rank(warps, w) > self._rank(warps, self.best[warps])] if warps else []
            if grows and more_warps:
                moves.append({**self.best, name: value, warps: more_warps[-1]})
        return moves

    def _rank(self, name: str, value) -> int:
        choices = self.choices[name]
        return choices.index(value) if value in choices else -1

    def mark_pending(self, config: dict, description: str) -> None:
        self.scores[config_key(config)] = None
        self.pending, self.pending_description = config, description


class BuiltinAgent(Agent):
    """Keeps one CoordinateSearch per kernel job, so one agent serves a whole overnight run."""

    name = kind = "builtin"
    model = base_url = None
    instant = True          # asked on the loop's own thread, where `judged` and `state_dict` read its searches

    def __init__(self):
        self._searches: dict[tuple, CoordinateSearch] = {}

    def check_endpoint(self) -> None:
        """Nothing to reach: the search runs here."""

    def state_dict(self) -> dict:
        return {"searches": [{"kernel_type": kernel_type, "rank": rank, **asdict(search)}
                             for (kernel_type, rank), search in self._searches.items()]}

    def load_state(self, state: dict | None) -> None:
        self._searches = {}
        for entry in (state or {}).get("searches", []):
            entry = dict(entry)
            key = (entry.pop("kernel_type"), entry.pop("rank"))
            self._searches[key] = CoordinateSearch(**entry)
            self._searches[key].forget_waiting()

    def judged(self, job: dict, source: str, result: BenchResult | None) -> None:
        """With several GPUs: the verdict on one of the candidates proposed while others were being judged."""
        search = self._searches.get((job.get("kernel_type"), job.get("rank")))
        try:
            config, _ = read_tunables(source)
        except ValueError:
            return
        if search is not None and any(config_key(entry) == config_key(config) for entry in search.waiting):
            search.record(score(result), config)

    def propose(self, ctx: AgentContext) -> Proposal:
        job_key = (ctx.kernel_type, ctx.job.get("rank"))
        search = self._searches.get(job_key)
        if search is None:
            search = self._searches[job_key] = _start_search(ctx)
        elif search.pending is not None:
            search.record(_score_of_pending(ctx, search.pending_description))
        move = search.next_move()
        candidate = move["config"] if move is not None else search.next_config()
        if candidate is None and search.waiting:
            raise WaitForResults(f"{len(search.waiting)} configurations are being judged; their results decide the next")
        if candidate is None:
            raise SearchExhausted(
                f"{ctx.kernel_type}: coordinate descent over {', '.join(search.choices)} converged after "
                f"{len(search.scores)} configurations; best {format_literal(search.best)}")
        current, _ = _read(ctx.kernel_source)
        description = move["description"] if move is not None else ", ".join(
            f"{name} {format_literal(current.get(name))} -> {format_literal(value)}"
            for name, value in candidate.items() if current.get(name) != value)
        if ctx.in_flight is None:
            search.mark_pending(candidate, description)
        else:       # several at once: each from another direction (next_config skips those being judged)
            search.scores[config_key(candidate)] = None
            search.waiting.append(candidate)
        return Proposal(description, rewrite_tunables(ctx.kernel_source, candidate))


def _start_search(ctx: AgentContext) -> CoordinateSearch:
    tunables, choices = _read(ctx.kernel_source)
    if not choices:
        raise SearchExhausted(f"{ctx.kernel_type}: kernel.py lists no TUNABLE_CHOICES, so there is nothing to search")
    bound = axis_order.bound_of([ctx.last_result, *(result for _, result in ctx.best_versions), ctx.baseline])
    buckets = axis_order.buckets_used(ctx.kernel_type, tunables, ctx.job.get("shapes") or [], ctx.job.get("dtype"))
    search = CoordinateSearch(choices=choices, best=tunables, best_score=None, bound=bound, buckets=buckets,
                              order=axis_order.axis_order(list(choices), bound, buckets,
                                                          axis_order.declared_buckets(ctx.kernel_type)))
    measured = [result for result in (ctx.baseline, ctx.last_result) if result is not None]
    machine = gemm_moves.machine_of(ctx.platform, [result.device for result in measured]
                                    + [(result.limits or {}).get("gpu") for result in measured])
    search.moves = gemm_moves.propose(ctx.kernel_type, tunables, choices, ctx.job.get("shapes") or [],
                                      ctx.job.get("dtype"), machine)
    # A resumed run: the kept versions' configurations are already measured.
    for source, result in ctx.best_versions:
        try:
            config, _ = read_tunables(source)
        except ValueError:
            continue
        search.scores.setdefault(config_key(config), score(result))
    start = config_key(tunables)
    search.best_score = search.scores[start] if start in search.scores else score(ctx.baseline)
    search.scores[start] = search.best_score
    return search


def _score_of_pending(ctx: AgentContext, description: str) -> float | None:
    """The score of the previous proposal: its bench result's (the last result), else its row's in the history."""
    if ctx.last_result is not None:
        return score(ctx.last_result)
    for entry in reversed(ctx.history):
        if entry.get("description") == description:
            return _score(entry.get("correctness"), entry.get("throughput"), entry.get("latency_us"))
    return None


def _read(source: str) -> tuple[dict, dict[str, list]]:
    try:
        return read_tunables(source)
    except ValueError as err:
        raise SearchExhausted(f"the built-in agent cannot search this kernel.py: {err}") from None
