"""A run's budget bounds the GEMM starters' autotuning on a GPU (autokernel/profile/regions/autotune_budget.py): while
the time left of the starters' share pays for one, Inductor times its template's configs and our GEMM variant is
judged against them; after that a starter is made with the template's first config, unjudged, and the run is told.
No GPU here: Inductor's CPU output stands in for the GPU's, and a fake clock for the time autotuning takes."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.agents.tunables import read_tunables  # noqa: E402
from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.profile.regions import autotune_budget, gemm_variant, inductor, jobs, pick  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from tests.regions import small_models as models  # noqa: E402

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_past_the_starters_share_a_gemm_starter_takes_its_first_config_unjudged(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    [region] = find_regions(models.GemmSigmoidRowSum(), (models.rows(),)).regions
    store.save(region, tmp_path)
    made_on_cpu = inductor.generate(region.definition, CPU)
    clock, asked, judged = Clock(), [], []

    def generate(definition, on, *, autotune=True, **options):       # 50 s of autotuning, or none
        asked.append(autotune)
        clock.now += 50.0 if autotune else 1.0
        return made_on_cpu
    monkeypatch.setattr(inductor, "generate", generate)
    real_variant = gemm_variant.variant
    monkeypatch.setattr(gemm_variant, "variant", lambda region, on, log: real_variant(region, CPU, log))

    def judge(path, judged_region):
        judged.append(path.name)
        return pick.Verdict("", "PASS", 1.0)
    monkeypatch.setattr(pick, "judge_with_bench", judge)
    cache = tmp_path / f"{region.name}.cuda.starter.py"
    allowance = autotune_budget.AutotuneAllowance(deadline=120.0, clock=clock)
    said: list[str] = []
    with autotune_budget.bounded(allowance):
        first = jobs.starter_source(region.name, CUDA, log=said.append)
        assert asked == [True] and len(judged) == 2 and allowance.longest_s == 50.0
        cache.unlink()                          # 70 s left pays for another 50 s
        jobs.starter_source(region.name, CUDA, log=said.append)
        assert asked == [True, True] and len(judged) == 4
        cache.unlink()                          # 20 s left: not enough
        last = jobs.starter_source(region.name, CUDA, log=said.append)
    assert asked == [True, True, False] and len(judged) == 4, "neither autotuned nor judged"
    assert allowance.skipped == [region.name]
    assert any("made without Inductor's autotuning" in line for line in said)
    assert read_tunables(last)[1]["variant"] == read_tunables(first)[1]["variant"], "the same variants to search"


def test_outside_a_run_and_without_a_gpu_the_starters_are_made_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(tmp_path))
    [region] = find_regions(models.GemmSigmoidRowSum(), (models.rows(),)).regions
    store.save(region, tmp_path)
    asked = []
    real = inductor.generate
    monkeypatch.setattr(inductor, "generate", lambda definition, on, *, autotune=True, **options:
                        asked.append(autotune) or real(definition, on, **options))
    spent = autotune_budget.AutotuneAllowance(deadline=-1.0)
    with autotune_budget.bounded(spent):           # no GPU: nothing to time, whatever the budget
        jobs.starter_source(region.name, CPU)
    assert asked == [True] and spent.skipped == []


@pytest.fixture(autouse=True)
def _no_allowance_left_behind():
    yield
    assert autotune_budget._current.get() is None


def test_a_regions_configs_are_precompiled_on_every_cpu_whatever_the_compile_pools_size(tmp_path, monkeypatch):
    # The GPU gate sets TORCHINDUCTOR_COMPILE_THREADS=1 to start no compile pools; Inductor reads it for its
    # precompile threads too, and compiled each GEMM region's configs one at a time (inductor._precompile_threads).
    from torch._inductor import select_algorithm

    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    select_algorithm.get_num_workers.cache_clear()
    cpus = len(os.sched_getaffinity(0))
    seen = []
    real_compile = torch.compile

    def compile_watched(*args, **kwargs):        # what the precompile would take, asked while the region compiles
        seen.append(select_algorithm.get_num_workers())
        return real_compile(*args, **kwargs)

    [region] = find_regions(models.GemmSigmoidRowSum(), (models.rows(),)).regions
    monkeypatch.setattr(torch, "compile", compile_watched)
    inductor.generate(region.definition, CPU)
    assert seen == [cpus]
    assert select_algorithm.get_num_workers() == 1       # outside the region's compile, Inductor's own number
    with pytest.raises(RuntimeError), inductor._precompile_threads():
        raise RuntimeError("Inductor failed")
    assert select_algorithm.get_num_workers() == 1
