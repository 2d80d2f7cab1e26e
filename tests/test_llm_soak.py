"""Tests for benchmarks/loop.py llm-soak: its honest proposals are valid moves, its cheats reach the judge, its checks bite."""

import ast
import random
from pathlib import Path

import pytest

from autokernel.search import integrity, results
from benchmarks.suites import llm_soak

# The starters (kernels/_*.py are shared blocks copied into them, not starters).
KERNELS = sorted(path for path in Path(__file__).resolve().parents[1].joinpath("kernels").glob("*.py")
                 if not path.name.startswith("_"))


def _assigned(source: str, name: str):
    return next(ast.literal_eval(node.value) for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name)


@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_an_honest_proposal_moves_one_tunable_to_another_of_its_choices(path):
    source = path.read_text()
    description, changed = llm_soak.change_one_tunable(source, random.Random(path.stem))
    before, after = _assigned(source, "TUNABLES"), _assigned(changed, "TUNABLES")
    moved = [name for name in before if before[name] != after[name]]
    assert len(moved) == 1 and after[moved[0]] in _assigned(source, "TUNABLE_CHOICES")[moved[0]]
    assert description.startswith(moved[0])


@pytest.mark.parametrize("behaviour", ["tunable", "tunable_diff", "tunable_edit"])
@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_an_honest_proposal_reads_back_as_the_same_move_whole_as_a_diff_or_as_an_edit(path, behaviour):
    from autokernel.agents.reply import parse

    source = path.read_text()
    reply = llm_soak.reply_for(behaviour, source, random.Random(path.stem))
    _, expected = llm_soak.change_one_tunable(source, random.Random(path.stem))
    (candidate,), _ = parse(reply.text, current=source)
    assert candidate.source.rstrip("\n") == expected.rstrip("\n")


@pytest.mark.parametrize("behaviour", ["cheat_pytorch", "cheat_uninitialised"])
@pytest.mark.parametrize("path", KERNELS, ids=[p.stem for p in KERNELS])
def test_cheats_keep_the_contract_so_that_the_judge_itself_must_catch_them(path, behaviour):
    source = path.read_text()
    cheat = llm_soak.cheat(source, behaviour)
    integrity.check_contract(cheat, _assigned(source, "KERNEL_TYPE"))


def test_the_checks_catch_a_kept_cheat_and_a_gap_in_the_numbering(tmp_path):
    def row(experiment, description, status):
        cells = {"experiment": experiment, "correctness": "PASS", "description": description, "status": status}
        return "\t".join(str(cells.get(column, "")) for column in results.COLUMNS)

    rows = [row(1, "baseline", "baseline"), row(2, "soak-cheat: cheat_pytorch", "keep"), row(4, "BLOCK 1 -> 2", "revert")]
    (tmp_path / "results.tsv").write_text("\n".join(["\t".join(results.COLUMNS), *rows]) + "\n")
    summary = llm_soak.check(tmp_path, tmp_path, "", [0], 1, {})
    assert any("a cheat was kept" in failure for failure in summary["failures"])
    assert any("not numbered 1..N" in failure for failure in summary["failures"])
    assert any("has no commit" in failure for failure in summary["failures"])
