"""The GPU sweep's CPU path (benchmarks/kernels.py gemm-sweep --dry-run): it measures the models' GEMMs, checks every
plan, and leaves a table the starters accept (autokernel/core/starter_blocks.py); model_gemms finds the GQA shapes."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import json
import shutil

import pytest

from autokernel.core import starter_blocks
from autokernel.core.paths import TOOL_DIR
from benchmarks import kernels
from benchmarks.suites import gemm_sweep, model_gemms


def test_the_models_gemms_include_the_gqa_projections_and_the_dual_mlp():
    gemms = {g.key: g for g in model_gemms.model_gemms()}
    assert (4096, 512, 2048, "plain") in gemms        # GQA's k and v: 4 KV heads of 128
    assert (4096, 5632, 2048, "dual") in gemms and (512, 5632, 2048, "dual") in gemms
    assert (512, 50257, 768, "plain") in gemms        # GPT-2's head
    assert any("bert" in use for use in gemms[(512, 768, 768, "plain")].uses)     # shared shapes listed once


@pytest.mark.slow
def test_a_dry_run_checks_every_plan_and_writes_a_table_the_starters_accept(tmp_path):
    out = tmp_path / "out"
    assert kernels.main(["gemm-sweep", "--out", str(out), "--dry-run", "--limit", "2", "--workers", "2"]) == 0
    table = json.loads((out / "gemm_table.json").read_text())
    assert [(row["M"], row["kind"], row["dtype"]) for row in table["rows"]] == [
        (32, "plain", "float16"), (32, "plain", "bfloat16"), (32, "dual", "float16"), (32, "dual", "bfloat16")]
    for row in table["rows"]:
        assert row["plan"] in row["timings_us"] and not row["failures"] and row["cublas_us"] > 0
    assert set(table["plans"]) == {"float16/plain/64/64", "bfloat16/plain/64/64", "float16/dual/176/64",
                                   "bfloat16/dual/176/64"}
    assert "| 32 x 176 x 64 | dual | float16 |" in (out / "gemm_table.md").read_text()
    root = tmp_path / "layout"
    shutil.copytree(TOOL_DIR / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__", "cuda"))
    assert starter_blocks.ENGINE_FILE in starter_blocks.install_table(out / "gemm_table.json", root)
    assert starter_blocks.stale_copies(root) == []


def test_a_plan_that_does_not_match_is_never_chosen(tmp_path, monkeypatch):
    real = gemm_sweep._run_ours

    def wrong_for_one_plan(engine, gemm, a, weights, plan):
        out = real(engine, gemm, a, weights, plan)
        return out * 1.5 if plan.block_n == 256 else out      # 128x256x64/w8/s3, the space's first plan
    monkeypatch.setattr(gemm_sweep, "_run_ours", wrong_for_one_plan)
    assert kernels.main(["gemm-sweep", "--out", str(tmp_path), "--dry-run", "--limit", "1", "--workers", "1"]) == 0
    row = json.loads((tmp_path / "gemm_table.json").read_text())["rows"][0]
    assert "128x256x64/w8/s3/g8/k1/ws0" in row["failures"] and row["plan"] == "256x128x64/w8/s3/g8/k1/ws0"
