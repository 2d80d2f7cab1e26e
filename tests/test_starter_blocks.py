"""The GEMM engine block: every GEMM starter carries kernels/_gemm_engine.py's block verbatim, and a measured
table installs into it (autokernel/core/starter_blocks.py)."""

import ast
import json
import shutil
from pathlib import Path

import pytest

from autokernel.core import starter_blocks
from autokernel.core.kernel_file import import_file
from autokernel.core.paths import TOOL_DIR

GEMM_STARTERS = {"kernels/matmul.py", "kernels/fused_mlp.py", "kernels/rmsnorm_mlp.py", "kernels/rmsnorm_linear.py"}


def test_every_gemm_starter_carries_the_engine_block_as_its_source_has_it():
    carriers = {str(path.relative_to(TOOL_DIR)) for path in starter_blocks.starters_with_block()}
    assert carriers == GEMM_STARTERS
    assert starter_blocks.stale_copies() == [], "run: python -m autokernel.core.starter_blocks"


def _copy_layout(tmp_path: Path) -> Path:
    shutil.copytree(TOOL_DIR / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("__pycache__", "cuda"))
    return tmp_path


def test_sync_rewrites_a_copy_that_drifted_and_leaves_the_rest(tmp_path):
    root = _copy_layout(tmp_path)
    starter = root / "kernels" / "fused_mlp.py"
    text = starter.read_text()
    outside = text.replace(starter_blocks.block_of(text), "")
    starter.write_text(text.replace("ENGINE_MIN_K_PER_SPLIT = 512", "ENGINE_MIN_K_PER_SPLIT = 64"))
    assert starter_blocks.stale_copies(root) == ["kernels/fused_mlp.py"]
    assert starter_blocks.sync(root) == ["kernels/fused_mlp.py"]
    assert starter_blocks.stale_copies(root) == [] and starter.read_text() == text
    assert starter.read_text().replace(starter_blocks.block_of(starter.read_text()), "") == outside


def _table(plans):
    return {"device": "NVIDIA H100 80GB HBM3", "plans": plans, "rows": []}


def test_an_installed_table_reaches_every_starters_engine(tmp_path):
    root = _copy_layout(tmp_path)
    plans = {"float16/plain/2048/2048": [[4096, "128x256x64/w8/s4/g8/k1/ws0"], [512, "64x128x64/w4/s5/g8/k2/ws0"]],
             "bfloat16/dual/5632/2048": [[4096, "128x128x64/w8/s3/g8/k1/ws1"]]}
    table = tmp_path / "gemm_table.json"
    table.write_text(json.dumps(_table(plans)))
    changed = starter_blocks.install_table(table, root)
    assert set(changed) == {starter_blocks.ENGINE_FILE, starter_blocks.TABLE_FILE} | GEMM_STARTERS
    assert json.loads((root / starter_blocks.TABLE_FILE).read_text())["plans"] == plans
    for name in sorted(GEMM_STARTERS):
        tree = ast.parse((root / name).read_text())
        literal = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                       and getattr(node.targets[0], "id", None) == "GEMM_TABLE")
        installed = ast.literal_eval(literal)
        assert installed["float16/plain/2048/2048"] == [[512, "64x128x64/w4/s5/g8/k2/ws0"],
                                                        [4096, "128x256x64/w8/s4/g8/k1/ws0"]]      # sorted by M
        assert set(installed) == set(plans)
    engine = import_file(root / starter_blocks.ENGINE_FILE, "_test_installed_engine")
    assert engine._engine_table_plan(3000, 2048, 2048, engine.torch.float16, "plain").stages == 4


@pytest.mark.parametrize("plans,why", [
    ({"float16/plain/2048": [[1, "64x64x64/w4/s4"]]}, "is not dtype/plain|dual/N/K"),
    ({"float16/fused/2048/2048": [[1, "64x64x64/w4/s4"]]}, "is not dtype/plain|dual/N/K"),
    ({"float16/plain/2048/2048": [["512", "64x64x64/w4/s4"]]}, "not a list of"),
    ([], "must map"),
])
def test_a_malformed_table_is_refused_before_anything_is_written(tmp_path, plans, why):
    root = _copy_layout(tmp_path)
    before = (root / starter_blocks.ENGINE_FILE).read_text()
    table = tmp_path / "gemm_table.json"
    table.write_text(json.dumps(_table(plans)))
    with pytest.raises(ValueError, match=why):
        starter_blocks.install_table(table, root)
    assert (root / starter_blocks.ENGINE_FILE).read_text() == before


def test_markers_must_come_once_each_and_in_order():
    block = f"{starter_blocks.BEGIN} x ====\nA = 1\n{starter_blocks.END}\n"
    assert starter_blocks.block_span("head\n" + block + "tail\n") is not None
    assert starter_blocks.block_span("no engine here\n") is None
    with pytest.raises(starter_blocks.BlockError, match="expected one"):
        starter_blocks.block_span(block + block)
    with pytest.raises(starter_blocks.BlockError, match="before its begin"):
        starter_blocks.block_span(f"{starter_blocks.END}\n{starter_blocks.BEGIN} x\n")


def test_the_kept_table_file_is_the_one_installed():
    """kernels/gemm_table.json, when there is one, holds the plans the engine's GEMM_TABLE holds."""
    kept = TOOL_DIR / starter_blocks.TABLE_FILE
    engine = import_file(TOOL_DIR / starter_blocks.ENGINE_FILE, "_test_kept_table_engine")
    if not kept.exists():
        assert engine.GEMM_TABLE == {}
        return
    plans = json.loads(kept.read_text())["plans"]
    assert engine.GEMM_TABLE == {key: sorted(entries) for key, entries in plans.items()}
