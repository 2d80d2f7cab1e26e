"""Tests for autokernel/agents/tunables.py: reading TUNABLES and rewriting only their values."""

import ast
import re
from pathlib import Path

import pytest

from autokernel.agents.tunables import format_literal, read_tunables, rewrite_tunables

ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''"""A kernel."""
NAME = "café"; TUNABLES = {"BLOCK": 64, "num_warps": 4}  # trailing comment
TUNABLE_CHOICES = {"BLOCK": [32, 64, 128], "num_warps": [2, 4, 8]}


def kernel_fn(x):
    return TUNABLES["BLOCK"]
'''

MULTILINE = '''TUNABLES = {
    "BLOCK_M": 128,  # rows per program
    "num_stages": 3,
}
TUNABLE_CHOICES = {"BLOCK_M": [64, 128], "num_stages": [2, 3, 4]}
'''


def test_reads_both_literals():
    tunables, choices = read_tunables(SOURCE)
    assert tunables == {"BLOCK": 64, "num_warps": 4}
    assert choices == {"BLOCK": [32, 64, 128], "num_warps": [2, 4, 8]}


@pytest.mark.parametrize("starter", sorted(p for p in (ROOT / "kernels").glob("*.py") if not p.name.startswith("_")), ids=lambda p: p.name)
def test_every_starter_declares_searchable_tunables(starter):
    source = starter.read_text()
    tunables, choices = read_tunables(source)
    assert choices, "a starter without TUNABLE_CHOICES gives the built-in agent nothing to search"
    assert rewrite_tunables(source, tunables) == source


def test_rewrite_replaces_only_the_changed_value_even_after_non_ascii_text():
    rewritten = rewrite_tunables(SOURCE, {"BLOCK": 64, "num_warps": 8})
    assert rewritten == SOURCE.replace('"num_warps": 4', '"num_warps": 8')
    assert read_tunables(rewritten)[0] == {"BLOCK": 64, "num_warps": 8}


def test_rewrite_keeps_the_layout_and_comments_of_a_multiline_literal():
    rewritten = rewrite_tunables(MULTILINE, {"BLOCK_M": 64, "num_stages": 4})
    assert rewritten == MULTILINE.replace("128,  #", "64,  #").replace('"num_stages": 3', '"num_stages": 4')


def test_rewrite_with_new_keys_replaces_the_whole_literal_and_nothing_else():
    rewritten = rewrite_tunables(SOURCE, {"BLOCK": 32, "num_stages": 2})
    assert rewritten == SOURCE.replace('{"BLOCK": 64, "num_warps": 4}', '{"BLOCK": 32, "num_stages": 2}')


def test_rewrite_keeps_a_changed_type_even_when_values_compare_equal():
    rewritten = rewrite_tunables("TUNABLES = {'EVEN': 1}\n", {"EVEN": True})
    assert rewritten == "TUNABLES = {'EVEN': True}\n"


def test_annotated_assignment_is_supported():
    source = 'TUNABLES: dict = {"BLOCK": 16}\nTUNABLE_CHOICES: dict = {"BLOCK": [16, 32]}\n'
    assert read_tunables(source) == ({"BLOCK": 16}, {"BLOCK": [16, 32]})
    assert rewrite_tunables(source, {"BLOCK": 32}) == source.replace('"BLOCK": 16}', '"BLOCK": 32}')


@pytest.mark.parametrize("source, complaint", [
    ("X = 1\n", "no top-level `TUNABLES"),
    ('TUNABLES = {"A": 1}\n', "no top-level `TUNABLE_CHOICES"),
    ('TUNABLES = {"A": 1}\nTUNABLES = {"A": 2}\nTUNABLE_CHOICES = {}\n', "assigns TUNABLES 2 times"),
    ("TUNABLES = dict(A=1)\nTUNABLE_CHOICES = {}\n", "plain dict literal"),
    ("TUNABLES = [1]\nTUNABLE_CHOICES = {}\n", "must be a dict literal"),
    ('TUNABLES = {"A": 1}\nTUNABLE_CHOICES = {"B": [1]}\n', "names 'B', which TUNABLES does not have"),
    ('TUNABLES = {"A": 1}\nTUNABLE_CHOICES = {"A": []}\n', "non-empty list"),
    ("TUNABLES = {\n", "does not parse"),
])
def test_bad_declarations_are_explained(source, complaint):
    with pytest.raises(ValueError, match=re.escape(complaint)):
        read_tunables(source)


def test_format_literal_round_trips_through_literal_eval():
    value = {"name": 'say "hi"\n', "sizes": [1, 2.5], "pair": (3,), "on": False, "none": None}
    assert ast.literal_eval(format_literal(value)) == value


def test_format_literal_rejects_values_without_a_literal_form():
    with pytest.raises(ValueError, match="cannot write"):
        format_literal({"fn": print})
