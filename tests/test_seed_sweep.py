"""A small seed sweep in CI: every starter on every adversarial case, every dtype, a few seeds and
the seed that used to fail an honest kernel. benchmarks/loop.py seed-sweep runs the same function over
200 seeds; its log is in benchmarks/results/."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from autokernel.kernel_types import registry  # noqa: E402
from benchmarks.suites import seed_sweep  # noqa: E402

SEEDS = 3


@pytest.mark.slow
@pytest.mark.parametrize("kernel_type", list(registry.REGISTRY))
def test_honest_starters_pass_every_adversarial_case_at_every_seed(kernel_type):
    rows = seed_sweep.sweep_type((kernel_type, SEEDS))
    assert rows, "every kernel type has adversarial cases"
    failures = [f"{r['case']} {r['dtype']} {failure}" for r in rows for failure in r["failures"]]
    assert failures == []
    assert all(r["seeds"] >= SEEDS for r in rows)


def test_the_seed_that_used_to_fail_is_in_the_sweep():
    rows = seed_sweep.sweep_type(("flash_attention", 0))
    float32 = next(r for r in rows if r["dtype"] == "float32")
    assert float32["seeds"] == 1 and float32["failures"] == []
