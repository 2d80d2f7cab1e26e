"""Tests for autokernel/agents/edits.py: diffs and search/replace blocks applied to a kernel, or refused with why."""

import pytest

from autokernel.agents.edits import EditError, apply_diff, apply_search_replace, unified

BASE = "".join(f"def f{n}(x):\n    return x\n\n" for n in range(6))


def test_a_diff_made_by_unified_applies_back():
    after = BASE.replace("def f3(x):\n    return x", "def f3(x):\n    return 2 * x")
    assert apply_diff(BASE, unified(BASE, after, "a/kernel.py", "b/kernel.py")) == after


def test_hunks_are_found_by_their_lines_nearest_the_stated_place_and_in_order():
    # "    return x" occurs six times: each hunk's context decides, and wrong line numbers do not matter.
    diff = ("@@ -90,2 +90,2 @@\n def f1(x):\n-    return x\n+    return x + 1\n"
            "@@ -1,2 +1,2 @@\n def f4(x):\n-    return x\n+    return x + 4\n")
    result = apply_diff(BASE, diff)
    assert "def f1(x):\n    return x + 1" in result and "def f4(x):\n    return x + 4" in result
    assert result.count("    return x\n") == 4
    bare = apply_diff(BASE, "@@ -8,1 +8,1 @@\n-    return x\n+    return -x\n")      # no context: nearest line 8
    assert bare.splitlines()[7] == "    return -x" and bare.count("return -x") == 1


def test_a_blank_context_line_without_its_space_and_trailing_spaces_still_match():
    diff = "@@ -2,3 +2,3 @@\n     return x   \n\n-def f1(x):\n+def g1(x):\n"
    assert apply_diff(BASE, diff).startswith("def f0(x):\n    return x\n\ndef g1(x):\n")


def test_a_diff_that_does_not_match_says_which_hunk():
    with pytest.raises(EditError, match="hunk 2 of the diff does not match.*'def nowhere"):
        apply_diff(BASE, "@@ -1 +1 @@\n-def f0(x):\n+def g0(x):\n@@ -5 +5 @@\n-def nowhere(x):\n+def g(x):\n")


def test_search_replace_needs_a_unique_exact_match():
    block = "<<<<<<< SEARCH\n{}=======\n{}>>>>>>> REPLACE\n"
    assert apply_search_replace(BASE, block.format("def f2(x):\n", "def g2(x):\n")).count("def g2(x):") == 1
    with pytest.raises(EditError, match="occurs 6 times"):
        apply_search_replace(BASE, block.format("    return x\n", "    return 0\n"))
    with pytest.raises(EditError, match="nothing to search for"):
        apply_search_replace(BASE, block.format("", "x = 1\n"))
