"""A GEMM region's other starter: the menu matmul's GEMM with the region's epilogue (autokernel/profile/regions/
gemm_variant.py), checked in Triton's interpreter against the region's reference with the judge's own tolerance."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import subprocess

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from autokernel.agents.tunables import read_tunables, rewrite_tunables  # noqa: E402
from autokernel.core.kernel_file import import_file  # noqa: E402
from autokernel.judge.correctness import compare  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.kernel_types.regions.inputs import make_inputs  # noqa: E402
from autokernel.profile.regions import epilogue, gemm_variant, jobs, pick, starter  # noqa: E402
from autokernel.profile.regions.epilogue_ops import Unsupported  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from autokernel.routing.manifest import write_manifest  # noqa: E402
from benchmarks.common import load_problem  # noqa: E402
from tests.regions.starters import judged_again  # noqa: E402

CPU = torch.device("cpu")
# Small tiles and pointer loads: several column tiles per row (the partials' combine), masked edges, no TMA.
SMALL_TILES = {"gemm_BLOCK_M": 32, "gemm_BLOCK_N": 32, "gemm_BLOCK_K": 16, "gemm_tma": False}


def problem_region(name: str):
    module = load_problem(name, 16)
    torch.manual_seed(0)
    [region] = find_regions(module.Model(*module.get_init_inputs()).eval(), tuple(module.get_inputs()),
                            name=name).regions
    return region


def only_region(model: nn.Module, *inputs):
    [region] = find_regions(model, inputs).regions
    return region


def check(source: str, region, tmp_path, changes: dict, seed: int = 3) -> None:
    """The file, TUNABLES changed, computes the region within the judge's tolerance for its dtype."""
    tunables, _ = read_tunables(source)
    path = tmp_path / f"{region.name}_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(rewrite_tunables(source, {**tunables, **changes}))
    module = import_file(path, f"gemm_variant_{path.stem}")
    gen = torch.Generator()
    gen.manual_seed(seed)
    inputs = make_inputs(region.definition, gen, CPU)
    expected = region.definition.run(inputs)
    oracle = region.definition.run({k: v.double() if v.is_floating_point() else v for k, v in inputs.items()},
                                   oracle=torch.float64)
    compare(module.kernel_fn(**inputs), expected, oracle, expected.dtype)


def engine_source(region) -> str:
    made = gemm_variant.variant(region, CPU)
    assert made is not None
    return starter.write(region, {gemm_variant.VARIANT: made}, generated_on="cpu", versions="test")


@pytest.mark.parametrize("problem", ["gemm_gelu_scale", "gemm_relu_rowmax", "gemm_sigmoid_rowsum",
                                     "gemm_sigmoid_sum_logsumexp"])
def test_the_gemm_problems_regions_run_on_the_engine_with_their_epilogue(problem, tmp_path):
    region = problem_region(problem)
    source = engine_source(region)
    assert "input_precision=PRECISION" in source and read_tunables(source)[0]["gemm_precision"] == "tf32x3"
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


class Mixed(nn.Module):
    """A 3-D input, a residual read per element, a mean over each row: most of what an epilogue may hold."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(40, 72)

    def forward(self, x, residual):
        y = F.silu(self.linear(x)).clamp(min=-1.0, max=2.0) * 2.0 + residual
        return torch.mean(F.gelu(y, approximate="tanh"), dim=-1)


class ScaledProduct(nn.Module):
    """mm without a bias, B read as (K, N) rows: TMA takes B's rows, not its transpose's."""

    def forward(self, a, b):
        return torch.matmul(a, b) * 0.5


class Linear(nn.Module):
    def __init__(self, activation):
        super().__init__()
        self.linear, self.activation = nn.Linear(32, 64), activation

    def forward(self, x):
        return self.activation(self.linear(x))


def test_residuals_views_and_a_row_mean_are_read_from_the_regions_ops(tmp_path):
    region = only_region(Mixed(), torch.randn(3, 10, 40), torch.randn(3, 10, 72))
    e = epilogue.read(region.definition)
    assert (e.M, e.N, e.K, e.row_reduce, e.out_level) == (30, 72, 40, "sum", epilogue.ROW)
    assert sorted(o.strides for o in e.operands) == [(0, 1), (72, 1)]          # the bias row, the residual
    source = engine_source(region)
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


@pytest.mark.parametrize("n", [24, 1])
def test_a_product_of_two_inputs_reads_b_by_its_rows(n, tmp_path):
    """One column (a matrix-vector product) too: B^T's one row gets a row step TMA can describe, not 0."""
    region = only_region(ScaledProduct(), torch.randn(48, 40), torch.randn(40, n))
    assert 0 not in epilogue.read(region.definition).bt.strides
    source = engine_source(region)
    rows = "bt.t(), [block_k, block_n]" if n > 1 else "bt, [block_n, block_k]"     # one column: B^T's one row
    assert f"b_src = TensorDescriptor.from_tensor({rows}) if tma else bt" in source
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_regions_take_the_engines_plan_and_no_float32_precision(dtype, tmp_path):
    region = only_region(Linear(lambda y: torch.relu(y) - 0.25).to(dtype), torch.randn(48, 32).to(dtype))
    source = engine_source(region)
    assert "gemm_precision" not in read_tunables(source)[0] and "PRECISION='ieee'" in source
    check(source, region, tmp_path, {})


class RowLogSumExp(Linear):
    """KernelBench's Gemm -> LogSumExp over each row -> activations: the row's maxima and sums combined per tile."""

    def forward(self, x):
        return F.gelu(F.leaky_relu(torch.logsumexp(self.linear(x), dim=1, keepdim=True), 0.01))


class RowMaxValues(Linear):
    def forward(self, x):
        return torch.max(self.linear(x) * 2.0, dim=1)[0] - 1.0


class BatchNormed(Linear):
    """Gemm -> BatchNorm1d in inference (its running statistics per column) -> GELU."""

    def __init__(self):
        super().__init__(F.gelu)
        self.norm = nn.BatchNorm1d(64)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-1.0, 1.0)
            self.norm.running_var.uniform_(0.5, 2.0)
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return F.gelu(self.norm(self.linear(x) * 0.5))


class OverOneColumn(Linear):
    """KernelBench's tricks: a max then a mean over the one column left, a softmax over it (all ones)."""

    def forward(self, x):
        y = torch.max(self.linear(x), dim=1, keepdim=True)[0]
        y = y - y.mean(dim=1, keepdim=True)
        return F.gelu(y) + torch.softmax(y, dim=1)


@pytest.mark.parametrize("model", [RowLogSumExp, RowMaxValues, BatchNormed, OverOneColumn])
def test_row_logsumexp_max_values_and_inference_batch_norm_are_epilogues(model, tmp_path):
    made = model() if model is BatchNormed else model(None)
    region = only_region(made.eval(), torch.randn(40, 32))
    source = engine_source(region)
    check(source, region, tmp_path, {})
    check(source, region, tmp_path, SMALL_TILES)


def test_max_dims_indices_are_not_an_epilogue():
    region = only_region(Linear(lambda y: torch.max(y, dim=1)[1]), torch.randn(8, 32))
    with pytest.raises(Unsupported, match="other than its values"):
        epilogue.read(region.definition)


def test_a_region_whose_epilogue_cannot_be_written_keeps_inductors_starter_alone():
    region = only_region(Linear(torch.sin), torch.randn(8, 32))
    with pytest.raises(Unsupported, match="the pointwise op sin"):
        epilogue.read(region.definition)
    said = []
    assert gemm_variant.variant(region, CPU, said.append) is None
    assert said and "the pointwise op sin" in said[0] and "Inductor's starter alone" in said[0]


def test_a_gemm_output_read_in_another_order_is_refused():
    class Transposed(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(32, 64)

        def forward(self, x):
            return torch.relu(self.linear(x).transpose(0, 1).contiguous())
    region = only_region(Transposed(), torch.randn(8, 32))
    with pytest.raises(Unsupported, match="reorders"):
        epilogue.read(region.definition)


def test_the_judged_pick_puts_the_faster_correct_variant_first_and_drops_a_wrong_one():
    made = {"inductor": "i", "looped": "l", "engine": "e"}

    def verdicts(engine: str, engine_us: float, inductor_us: float = 100.0):
        return [pick.Verdict("inductor", "PASS", inductor_us), pick.Verdict("engine", engine, engine_us)]
    assert list(pick.order(made, "engine", verdicts("PASS", 50.0))) == ["engine", "inductor", "looped"]
    assert list(pick.order(made, "engine", verdicts("PASS", 150.0))) == ["inductor", "looped", "engine"]
    assert list(pick.order(made, "engine", verdicts("FAIL", 10.0))) == ["inductor", "looped"]
    failing_inductor = [pick.Verdict("inductor", "FAIL", 10.0), pick.Verdict("engine", "PASS", 50.0)]
    assert list(pick.order(made, "engine", failing_inductor)) == ["engine", "inductor", "looped"]


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))

    def save(region):
        store.save(region, tmp_path)
        return region
    return save


def test_a_gemm_regions_starter_holds_inductors_code_and_ours_each_computing_it(saved, tmp_path, monkeypatch):
    region = saved(problem_region("gemm_sigmoid_rowsum"))
    source = jobs.starter_source(region.name, CPU, judged=False)     # unjudged: Inductor's stays first
    tunables, choices = read_tunables(source)
    assert tunables["variant"] == "inductor" and choices["variant"] == ["inductor", "engine"]
    for variant in choices["variant"]:
        check(source, region, tmp_path, {"variant": variant})
    source = judged_again(region, "engine", 50.0, 100.0, monkeypatch)     # ours twice as fast: it goes first
    assert read_tunables(source)[0]["variant"] == "engine"
    check(source, region, tmp_path, {})


@pytest.mark.slow
def test_the_engine_variant_passes_the_judges_five_stages(saved):
    region = saved(problem_region("gemm_sigmoid_sum_logsumexp"))
    [verdict] = pick.judge_variants({"engine": engine_source(region)}, region)
    assert verdict.correctness == "PASS", verdict.message


@pytest.mark.slow
def test_inside_a_sandbox_that_cannot_nest_the_pick_runs_the_judge_as_a_plain_child(saved, monkeypatch):
    """verify --starters makes the starters inside verify's sandbox, where a second one may not start."""
    from autokernel.judge import runner

    def no_sandbox(*args, **kwargs):
        raise runner.SandboxError("a user namespace was made but its ids could not be mapped")
    monkeypatch.setattr(runner, "run_bench", no_sandbox)
    region = saved(problem_region("gemm_relu_rowmax"))
    [verdict] = pick.judge_variants({"engine": engine_source(region)}, region)
    assert verdict.correctness == "PASS" and verdict.latency_us, verdict.message


def test_a_pick_that_cannot_judge_leaves_inductors_code_first_and_never_drops_the_starter(saved, monkeypatch):
    """On the H200 the pick raised PermissionError inside verify's sandbox (the home folder's caches), and every GEMM
    region lost its starter: the pick only orders the variants, so a failure of its own changes nothing."""
    def broken(path, judged_region):
        raise PermissionError("[Errno 13] Permission denied: '/root/.cache/autokernel'")
    monkeypatch.setattr(pick, "judge_with_bench", broken)
    region = saved(problem_region("gemm_sigmoid_rowsum"))
    source = jobs.starter_source(region.name, CPU, judged=True)
    tunables, choices = read_tunables(source)
    assert tunables["variant"] == "inductor" and choices["variant"] == ["inductor", "engine"]


def test_inside_verifys_sandbox_the_pick_judges_in_a_plain_child_with_caches_of_its_own(saved, monkeypatch, tmp_path):
    from autokernel.judge import runner
    from autokernel.sandbox.child_env import SANDBOXED_CHILD_VARIABLE

    def refused(*args, **kwargs):
        raise AssertionError("no sandbox is started inside verify's sandbox")
    seen = {}

    def plain_child(cmd, **kwargs):
        seen.update(kwargs)
        raise subprocess.TimeoutExpired(cmd, 1)
    monkeypatch.setattr(runner, "run_bench", refused)
    monkeypatch.setattr(pick.subprocess, "run", plain_child)
    monkeypatch.setenv(SANDBOXED_CHILD_VARIABLE, "1")
    region = saved(problem_region("gemm_relu_rowmax"))
    path = tmp_path / "kernel.py"
    path.write_text("")
    verdict = pick.judge_with_bench(path, region)
    assert verdict.correctness == "TIMEOUT" and seen["env"]["XDG_CACHE_HOME"] == str(tmp_path / "cache")


def test_a_model_routed_to_the_engine_variant_computes_what_it_did(tmp_path, monkeypatch):
    """Plugged in, eagerly and under torch.compile, the GEMM variant's kernel_fn takes the region's place."""
    from autokernel.core.contracts import ManifestEntry
    from autokernel.routing import plugin
    from tests.regions import small_models as models

    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path / store.FOLDER))
    model, x = models.GemmSigmoidRowSum(), models.rows()
    region = only_region(model, x)
    store.save(region, tmp_path / store.FOLDER)
    (tmp_path / "ours.py").write_text(engine_source(region))
    entry = ManifestEntry(file="ours.py", kernel_type=region.name, rank=1, shapes=[region.shape()],
                          dtypes=["float32"]).to_json()
    write_manifest(tmp_path / "manifest.json", {f"1_{region.name}": entry})
    with torch.no_grad():
        expected = model(x)
        plugin.plug_in(model, tmp_path, policy="all")
        try:
            eager = (model(x), model(x))[1]         # the first call resolves the routes as it is
            compiled = torch.compile(model, backend=plugin.compile_backend(model))(x)
            hits = plugin.router_of(model).summary()["kernels"][0]["hits"]
        finally:
            plugin.unplug(model)
            torch._dynamo.reset()
    for got in (eager, compiled):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert hits >= 1
