"""Tests for autokernel/agents/builtin.py: coordinate descent over TUNABLES, driven by scripted bench results."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from autokernel.agents.base import AgentContext, SearchExhausted
from autokernel.agents.builtin import BuiltinAgent, config_key, neighbours, score
from autokernel.agents.tunables import read_tunables, rewrite_tunables
from autokernel.core.contracts import BenchResult

ROOT = Path(__file__).resolve().parents[2]
KERNEL = '''"""A kernel with two tunables."""
KERNEL_TYPE = "softmax"
TUNABLES = {"BLOCK": 64, "num_warps": 4}
TUNABLE_CHOICES = {"BLOCK": [16, 32, 64, 128, 256], "num_warps": [1, 2, 4, 8]}


def kernel_fn(x):
    return x
'''


def passing(throughput: float) -> BenchResult:
    return BenchResult("PASS", throughput=throughput, throughput_unit="GB/s", latency_us=1e6 / throughput)


FAILING = BenchResult("FAIL", failed_stage="edge shapes", message="wrong", throughput=None)


def context(*args, **fields) -> AgentContext:
    """An AgentContext as the loop makes one: the job's JSON, and its measured baseline (here job["baseline"]) apart."""
    ctx = AgentContext(*args, **fields)
    return replace(ctx, job={key: value for key, value in ctx.job.items() if key != "baseline"},
                   baseline=ctx.job.get("baseline"))


def peak_at(block: int, warps: int):
    """A smooth throughput landscape with its single peak at (block, warps)."""
    def bench(config: dict) -> BenchResult:
        distance = (math.log2(config["BLOCK"] / block)) ** 2 + (math.log2(config["num_warps"] / warps)) ** 2
        return passing(1000.0 / (1.0 + distance))
    return bench


def run_loop(bench, source=KERNEL, agent=None, rank=1, max_experiments=100):
    """Plays the overnight loop: propose, bench, keep if faster, until the agent gives up."""
    agent = agent or BuiltinAgent()
    kept, kept_result = source, bench(read_tunables(source)[0])
    job = {"rank": rank, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "gpu": "test", "baseline": kept_result}
    last_result, history, proposals = None, [], []
    for experiment in range(1, max_experiments + 1):
        ctx = context("softmax", kept, last_result, history[-10:], [(kept, kept_result)], "", job)
        try:
            proposal = agent.propose(ctx)
        except SearchExhausted as exhausted:
            return proposals, kept, str(exhausted)
        proposals.append(proposal)
        last_result = bench(read_tunables(proposal.kernel_source)[0])
        improved = score(last_result) is not None and score(last_result) > score(kept_result)
        if improved:
            kept, kept_result = proposal.kernel_source, last_result
        history.append({"experiment": experiment, "description": proposal.description,
                        "status": "keep" if improved else "revert", "correctness": last_result.correctness,
                        "throughput": last_result.throughput, "speedup_vs_pytorch": None, "message": ""})
    raise AssertionError(f"the search did not stop within {max_experiments} experiments")


def configs(proposals) -> list[dict]:
    return [read_tunables(p.kernel_source)[0] for p in proposals]


def test_climbs_to_the_optimum_and_stops():
    proposals, kept, message = run_loop(peak_at(block=256, warps=1))
    assert read_tunables(kept)[0] == {"BLOCK": 256, "num_warps": 1}
    assert "converged" in message and '{"BLOCK": 256, "num_warps": 1}' in message
    assert len(proposals) < 5 * 4, "coordinate descent needs fewer runs than the full grid"


def test_never_proposes_a_configuration_twice_or_the_starting_one():
    proposals, _, _ = run_loop(peak_at(block=32, warps=8))
    seen = [config_key(c) for c in configs(proposals)]
    assert len(seen) == len(set(seen))
    assert config_key({"BLOCK": 64, "num_warps": 4}) not in seen


def test_proposals_change_only_the_tunables_and_say_how():
    agent = BuiltinAgent()
    ctx = context("softmax", KERNEL, None, [], [], "", {"rank": 1, "baseline": passing(100.0)})
    proposal = agent.propose(ctx)
    assert proposal.description == "BLOCK 64 -> 32"
    assert proposal.kernel_source == KERNEL.replace('"BLOCK": 64,', '"BLOCK": 32,')


def test_failures_are_dead_ends():
    optimum = peak_at(block=256, warps=4)

    def bench(config):
        return FAILING if config["BLOCK"] == 256 else optimum(config)

    proposals, kept, _ = run_loop(bench)
    assert read_tunables(kept)[0] == {"BLOCK": 128, "num_warps": 4}
    tried = configs(proposals)
    assert sum(c["BLOCK"] == 256 for c in tried) == 1, "nothing is built on a failed configuration"


def test_same_results_give_the_same_proposals():
    first, _, _ = run_loop(peak_at(block=16, warps=2))
    second, _, _ = run_loop(peak_at(block=16, warps=2))
    assert [p.kernel_source for p in first] == [p.kernel_source for p in second]


def test_latency_is_the_score_when_there_is_no_throughput():
    def bench(config):
        return BenchResult("PASS", throughput=None, latency_us=abs(config["num_warps"] - 2) + 10.0)

    _, kept, _ = run_loop(bench)
    assert read_tunables(kept)[0]["num_warps"] == 2


def test_exhausts_when_every_choice_is_tried():
    source = 'TUNABLES = {"num_stages": 1}\nTUNABLE_CHOICES = {"num_stages": [1, 2]}\n'
    proposals, _, message = run_loop(lambda config: passing(10.0), source=source)
    assert configs(proposals) == [{"num_stages": 2}]
    assert "converged after 2 configurations" in message


def test_each_job_has_its_own_search():
    agent = BuiltinAgent()
    first = agent.propose(context("softmax", KERNEL, None, [], [], "", {"rank": 1}))
    second = agent.propose(context("softmax", KERNEL, None, [], [], "", {"rank": 2}))
    assert first.kernel_source == second.kernel_source


def test_resumed_run_does_not_repeat_kept_versions():
    older = rewrite_tunables(KERNEL, {"BLOCK": 32, "num_warps": 4})
    ctx = context("softmax", KERNEL, None, [], [(KERNEL, passing(200.0)), (older, passing(150.0))], "", {"rank": 1})
    assert read_tunables(BuiltinAgent().propose(ctx).kernel_source)[0] == {"BLOCK": 128, "num_warps": 4}


def test_outcome_is_read_from_history_when_there_is_no_last_result():
    agent = BuiltinAgent()
    job = {"rank": 1, "baseline": passing(100.0)}
    proposal = agent.propose(context("softmax", KERNEL, None, [], [], "", job))
    history = [{"experiment": 1, "description": proposal.description, "status": "keep", "correctness": "PASS",
                "throughput": 500.0, "speedup_vs_pytorch": None, "message": ""}]
    following = agent.propose(context("softmax", proposal.kernel_source, None, history, [], "", job))
    assert read_tunables(following.kernel_source)[0] == {"BLOCK": 16, "num_warps": 4}, "walks on past an improvement"


@pytest.mark.parametrize("source, complaint", [
    ('TUNABLES = {"A": 1}\nTUNABLE_CHOICES = {}\n', "lists no TUNABLE_CHOICES"),
    ("def kernel_fn(x):\n    return x\n", "cannot search this kernel.py: kernel source has no top-level `TUNABLES"),
])
def test_kernels_without_a_search_space_are_exhausted_at_once(source, complaint):
    with pytest.raises(SearchExhausted, match=complaint):
        BuiltinAgent().propose(context("softmax", source, None, [], [], "", {"rank": 1}))


def test_searches_a_real_starter():
    source = (ROOT / "kernels" / "softmax.py").read_text()
    proposal = BuiltinAgent().propose(context("softmax", source, None, [], [], "", {"rank": 1}))
    before, choices = read_tunables(source)
    after, _ = read_tunables(proposal.kernel_source)
    changed = {name for name in before if before[name] != after[name]}
    assert len(changed) == 1 and all(after[name] in choices[name] for name in changed)


def test_neighbours_follow_the_choice_order():
    assert neighbours([1, 2, 4, 8], 4) == [2, 8]
    assert neighbours([1, 2, 4, 8], 1) == [2]
    assert neighbours([1, 2, 4, 8], 3) == [1, 2, 4, 8], "an unlisted value explores the whole axis"


def test_the_search_survives_a_resume_without_repeating_a_configuration():
    bench = peak_at(block=256, warps=1)
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "gpu": "test",
           "baseline": bench(read_tunables(KERNEL)[0])}
    first = BuiltinAgent()
    ctx = context("softmax", KERNEL, None, [], [(KERNEL, job["baseline"])], "", job)
    seen = [first.propose(ctx)]
    ctx.last_result = bench(read_tunables(seen[0].kernel_source)[0])     # reverted: the kept kernel stays KERNEL
    seen.append(first.propose(ctx))
    resumed = BuiltinAgent()
    resumed.load_state(first.state_dict())
    assert resumed.state_dict() == first.state_dict()
    ctx.last_result = bench(read_tunables(seen[1].kernel_source)[0])
    after = resumed.propose(ctx)
    configs = [config_key(read_tunables(p.kernel_source)[0]) for p in seen + [after]]
    assert len(set(configs)) == 3
    fresh = BuiltinAgent()
    assert config_key(read_tunables(fresh.propose(ctx).kernel_source)[0]) == configs[0], "without its state it repeats"


# --------------------------------------------------------------------------- the order of the axes
ROW_KERNEL = '''KERNEL_TYPE = "softmax"
TUNABLES = {"num_stages": 2, "BLOCK_M": 64, "MAX_BLOCK_N": 1024, "num_warps": 4, "ELEMS_PER_THREAD": 8}
TUNABLE_CHOICES = {"num_stages": [1, 2, 3], "BLOCK_M": [32, 64, 128], "MAX_BLOCK_N": [512, 1024, 2048],
                   "num_warps": [2, 4, 8], "ELEMS_PER_THREAD": [4, 8, 16]}
'''


def bound_result(bound: str | None, throughput: float = 100.0) -> BenchResult:
    """A passing result whose judge's summary (bench.py's `limits`) puts the kernel on this side of the roofline."""
    limits = {"gpu": "NVIDIA H100 SXM", "bound": bound} if bound else {"gpu": None, "bound": None}
    return replace(passing(throughput), limits=limits)


def axes_walked(bound: str | None, source: str = ROW_KERNEL, job: dict | None = None) -> list[str]:
    """The tunables in the order the search first changes each, on a flat landscape (nothing improves)."""
    job = job or {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16"}
    agent, kept = BuiltinAgent(), read_tunables(source)[0]
    ctx = context("softmax", source, None, [], [], "", {**job, "baseline": bound_result(bound)})
    walked = []
    while True:
        try:
            proposal = agent.propose(ctx)
        except SearchExhausted:
            return walked
        changed = [name for name, value in read_tunables(proposal.kernel_source)[0].items() if kept[name] != value]
        if len(changed) == 1:       # a wider tile tried with more warps walks no new axis
            walked += changed if changed[0] not in walked else []
        ctx.last_result = bound_result(bound, 50.0)


def test_a_memory_bound_kernel_walks_the_axes_that_move_memory_first():
    assert axes_walked("memory") == ["MAX_BLOCK_N", "num_warps", "ELEMS_PER_THREAD", "BLOCK_M", "num_stages"]


def test_a_compute_bound_kernel_walks_stages_and_warps_before_the_tiles():
    assert axes_walked("compute") == ["num_stages", "num_warps", "BLOCK_M", "MAX_BLOCK_N", "ELEMS_PER_THREAD"]


def test_a_tile_that_grows_is_tried_with_more_warps_too():
    # BLOCK_M 128 alone spills (slower); with 8 warps it is the peak. A one-tunable walk never gets there.
    def bench(config):
        if config["BLOCK_M"] == 128:
            return passing(2000.0 if config["num_warps"] == 8 else 10.0)
        return passing(100.0)
    proposals, kept, _ = run_loop(bench, source=ROW_KERNEL)
    assert read_tunables(kept)[0]["BLOCK_M"] == 128 and read_tunables(kept)[0]["num_warps"] == 8
    joint = [c for c in configs(proposals) if c["BLOCK_M"] == 128 and c["num_warps"] == 8]
    assert joint and "BLOCK_M 64 -> 128, num_warps 4 -> 8" in [p.description for p in proposals]
    # A tile that shrinks is not paired, and the pair is tried after the tile alone.
    assert not [c for c in configs(proposals)[:configs(proposals).index(joint[0])]
                if c["BLOCK_M"] == 32 and c["num_warps"] != 4]


def test_without_a_bound_the_axes_are_walked_in_declaration_order():
    # The CPU interpreter's summary has no bound: its timings say nothing about the GPU.
    assert axes_walked(None) == list(read_tunables(ROW_KERNEL)[0])


def test_a_matmul_job_walks_the_bucket_its_shapes_use_first_and_the_other_buckets_last():
    source = (ROOT / "kernels" / "matmul.py").read_text()
    source = source.replace('"engine_16bit": True', '"engine_16bit": False')      # the pointer tiles' buckets
    job = {"rank": 1, "kernel_type": "matmul", "shapes": [{"M": 512, "N": 4096, "K": 4096}], "dtype": "bfloat16"}
    agent = BuiltinAgent()
    proposal = agent.propose(context("matmul", source, None, [], [], "", {**job, "baseline": bound_result("compute")}))
    [search] = agent._searches.values()
    assert search.buckets == ["mid"] and search.bound == "compute"
    assert search.order[:7] == ["mid_stages", "mid_warps", "GROUP_M", "mid_BLOCK_M", "mid_BLOCK_N", "mid_BLOCK_K",
                                "split_k_min_k"]
    assert {name.split("_")[0] for name in search.order[-25:]} == {"engine", "large", "small", "ieee", "tc32"}
    before, after = read_tunables(source)[0], read_tunables(proposal.kernel_source)[0]
    assert [name for name in before if before[name] != after[name]] == ["mid_stages"]


def test_a_job_on_the_engine_walks_whole_plans_first():
    source = (ROOT / "kernels" / "rmsnorm_mlp.py").read_text()
    job = {"rank": 1, "kernel_type": "rmsnorm_mlp", "shapes": [{"M": 4096, "D": 2048, "F": 5632, "act": "silu"}],
           "dtype": "float16"}
    agent = BuiltinAgent()
    proposal = agent.propose(context("rmsnorm_mlp", source, None, [], [], "",
                                          {**job, "baseline": bound_result("compute")}))
    [search] = agent._searches.values()
    assert search.order[:6] == ["gate_up", "gate_up_plan", "down_plan", "warp_specialize", "group_m", "split_k"]
    after = read_tunables(proposal.kernel_source)[0]
    assert after["gate_up"] == "two_launch"
    # A whole plan has no order to step along: every other plan is a move before the next tunable.
    moves = search._moves_along("down_plan")
    assert [move["down_plan"] for move in moves] == read_tunables(source)[1]["down_plan"][1:]


def test_a_resumed_search_keeps_its_order_even_when_the_results_it_sees_change():
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "baseline": bound_result("memory")}
    first = BuiltinAgent()
    ctx = context("softmax", ROW_KERNEL, None, [], [], "", job)
    first.propose(ctx)
    ctx.last_result = bound_result("memory", 50.0)
    state = json.loads(json.dumps(first.state_dict()))            # as workspace/state.json stores it
    resumed = BuiltinAgent()
    resumed.load_state(state)
    # A resumed run whose results now read compute-bound (another GPU) still walks the order it chose.
    later = context("softmax", ROW_KERNEL, bound_result("compute", 50.0), [], [], "",
                         {**job, "baseline": bound_result("compute")})
    assert resumed.propose(later).kernel_source == first.propose(later).kernel_source
    assert resumed.state_dict() == first.state_dict()


def test_a_search_saved_before_orders_existed_resumes_in_declaration_order():
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "baseline": bound_result("compute")}
    agent = BuiltinAgent()
    agent.propose(context("softmax", ROW_KERNEL, None, [], [], "", job))
    state = agent.state_dict()
    for search in state["searches"]:
        for key in ("order", "bound", "buckets"):
            del search[key]
    old = BuiltinAgent()
    old.load_state(state)
    old._searches[("softmax", 1)].pending = None                   # its first proposal's outcome is unknown
    proposal = old.propose(context("softmax", ROW_KERNEL, None, [], [], "", job))
    before, after = read_tunables(ROW_KERNEL)[0], read_tunables(proposal.kernel_source)[0]
    assert [name for name in before if before[name] != after[name]] == ["num_stages"]


# ---------------------------------------------------------------------- several GPUs: proposals while others are judged
def test_with_candidates_in_flight_it_proposes_other_directions_then_waits_then_learns():
    from autokernel.agents.base import WaitForResults

    agent, bench = BuiltinAgent(), peak_at(block=256, warps=1)
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "baseline": bench(read_tunables(KERNEL)[0])}

    def ask(in_flight):
        return agent.propose(context("softmax", KERNEL, None, [], [(KERNEL, job["baseline"])], "", job,
                                          in_flight=in_flight))

    flying = []
    while True:
        try:
            flying.append(ask([p.description for p in flying]))
        except WaitForResults:
            break
    proposed = configs(flying)
    assert len(proposed) >= 2 and len({config_key(c) for c in proposed}) == len(proposed), "never the same twice"
    assert len({name for c in proposed for name, v in c.items() if read_tunables(KERNEL)[0][name] != v}) == 2, \
        "the candidates in flight move different tunables"
    for proposal in flying:             # verdicts come back: the search learns each one and goes on
        agent.judged(job, proposal.kernel_source, bench(read_tunables(proposal.kernel_source)[0]))
    best = max(proposed, key=lambda config: score(bench(config)))
    assert score(bench(best)) > score(job["baseline"])
    assert agent._searches[("softmax", 1)].best == best and not agent._searches[("softmax", 1)].waiting
    assert read_tunables(ask([]).kernel_source)[0] != best, "and it walks on from the best verdict"


def test_a_resumed_run_proposes_again_what_was_in_flight_when_it_was_killed():
    agent = BuiltinAgent()
    job = {"rank": 1, "kernel_type": "softmax", "shapes": [], "dtype": "float16", "baseline": passing(100.0)}
    ctx = context("softmax", KERNEL, None, [], [(KERNEL, passing(100.0))], "", job, in_flight=[])
    lost = agent.propose(ctx)
    resumed = BuiltinAgent()
    resumed.load_state(json.loads(json.dumps(agent.state_dict())))
    assert resumed.propose(ctx).kernel_source == lost.kernel_source, "never judged, so it is tried again"


# A GEMM region's starter as extract writes it on a GPU when the run's budget paid for no autotuning (session 25:
# gemm_relu_rowmax, float32): Inductor's GEMM template at its first config, its reduction, and the GEMM engine with
# the region's epilogue, chosen between by `variant`.
REGION = '''"""A GEMM region's starter: two ways of running it."""
KERNEL_TYPE = "softmax"
TUNABLES = {"k0_BLOCK_M": 32, "k0_num_warps": 2, "k0_num_stages": 1, "k1_R0_BLOCK": 2048, "gemm_BLOCK_M": 128,
            "gemm_num_stages": 3, "gemm_precision": "tf32x3", "variant": "inductor"}
TUNABLE_CHOICES = {"k0_BLOCK_M": [16, 32, 64], "k0_num_warps": [1, 2, 4], "k0_num_stages": [1, 2, 3],
                   "k1_R0_BLOCK": [1024, 2048], "gemm_BLOCK_M": [64, 128], "gemm_num_stages": [2, 3, 4],
                   "gemm_precision": ["ieee", "tf32x3"], "variant": ["inductor", "engine"]}


def kernel_fn(x):
    return x
'''


@pytest.mark.parametrize("bound", [None, "compute", "memory"])
def test_a_regions_other_way_of_running_is_measured_before_any_knob(bound):
    # On the H200 the untuned Inductor code took 5.2 ms and the engine 0.4: a loop that turned Inductor's stages
    # first spent its 3 minutes there and never measured the engine.
    def bench(config):
        latency_us = (400.0 if config["variant"] == "engine" else 5200.0) / (1.0 + 0.01 * config["k0_num_stages"])
        return BenchResult("PASS", throughput=1e6 / latency_us, throughput_unit="GB/s", latency_us=latency_us,
                           limits={"bound": bound} if bound else None)

    proposals, kept, _ = run_loop(bench, source=REGION)
    assert proposals[0].description == 'variant "inductor" -> "engine"'
    assert read_tunables(kept)[0]["variant"] == "engine"
