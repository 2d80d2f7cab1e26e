"""Tests for autokernel/agents/reply.py: a reply's candidates, in every form the playbook allows, and its errors."""

import pytest

from autokernel.agents.reply import MAX_FIX_TURNS, ReplyError, format_reply, parse

KERNEL = ('KERNEL_TYPE = "softmax"\nTUNABLES = {"BLOCK": 64}\n\n\ndef kernel_fn(x):\n'
          '    """Softmax over the last axis.\n\n    Example:\n\n```\ny = kernel_fn(x)\n```\n    """\n'
          '    return x\n')
FIXED = KERNEL.replace('"BLOCK": 64', '"BLOCK": 128')


def one(text: str, **options):
    (candidate,), notes = parse(text, current=KERNEL, **options)
    return candidate


def test_format_reply_round_trips_with_its_hypothesis():
    candidate = one(format_reply("BLOCK 64 -> 128", FIXED, hypothesis="more work per program"))
    assert (candidate.description, candidate.source, candidate.hypothesis, candidate.form) == (
        "BLOCK 64 -> 128", FIXED, "more work per program", "file")


def test_a_fence_inside_a_docstring_does_not_split_the_kernel():
    # The model's own fence, ``` as usual: the ``` lines of the docstring are inside a string, not the block's end.
    reply = f"DESCRIPTION: bigger block\n\n```python\n{FIXED}```\nThat is all.\n"
    assert one(reply).source == FIXED


@pytest.mark.parametrize("fence", ["~~~", "````"])
def test_other_fences_are_read(fence):
    assert one(f"DESCRIPTION: tilde\n{fence}python\n{FIXED}{fence}\n").source == FIXED


def test_parse_tolerates_prose_and_markdown_and_takes_the_full_file_over_a_snippet():
    reply = ("I looked at the kernel.\n\n**Hypothesis:** exp is slow\non this GPU\n\n**Description:** use   exp2\n\n"
             "The key line:\n```python\ny = tl.exp2(x)\n```\nFull file:\n```python\n" + FIXED + "```\nDone.")
    candidate = one(reply)
    assert (candidate.description, candidate.source, candidate.hypothesis) == ("use exp2", FIXED,
                                                                               "exp is slow on this GPU")


def test_a_unified_diff_is_applied_to_the_current_kernel():
    reply = ("HYPOTHESIS: wider rows\nDESCRIPTION: BLOCK 64 -> 128\n```diff\n--- a/kernel.py\n+++ b/kernel.py\n"
             "@@ -1,3 +1,3 @@\n KERNEL_TYPE = \"softmax\"\n-TUNABLES = {\"BLOCK\": 64}\n+TUNABLES = {\"BLOCK\": 128}\n\n```\n")
    candidate = one(reply)
    assert candidate.source == FIXED and candidate.form == "diff"


def test_search_replace_edits_are_applied_inside_a_fence_or_not():
    edit = '<<<<<<< SEARCH\nTUNABLES = {"BLOCK": 64}\n=======\nTUNABLES = {"BLOCK": 128}\n>>>>>>> REPLACE\n'
    assert one(f"DESCRIPTION: edits\n```text\n{edit}```\n").source == FIXED
    assert one(f"DESCRIPTION: bare edits\n{edit}").form == "edits"


def test_two_candidates_in_one_reply_are_both_taken_in_order_up_to_the_limit():
    reply = (format_reply("first idea", FIXED, hypothesis="one") + "\nAnd another direction:\n\n"
             + format_reply("second idea", KERNEL.replace("64", "32"), hypothesis="two"))
    candidates, notes = parse(reply, current=KERNEL, limit=4)
    assert [(c.description, c.hypothesis) for c in candidates] == [("first idea", "one"), ("second idea", "two")]
    assert notes == []
    (chosen,), notes = parse(reply, current=KERNEL, limit=1)
    assert chosen.description == "first idea" and notes == ["the reply held 2 candidates; only the first is taken"]


def test_an_unreadable_candidate_of_several_is_left_out_and_said():
    reply = ("DESCRIPTION: cannot apply\n```diff\n@@ -1 +1 @@\n-nowhere\n+x\n```\n"
             + format_reply("fine", FIXED))
    candidates, notes = parse(reply, current=KERNEL, limit=2)
    assert [c.description for c in candidates] == ["fine"]
    assert notes == ["left out: candidate 1 of 2: hunk 1 of the diff does not match the kernel it applies to: its "
                     "lines (from 'nowhere') are not there, in that order (it was applied to the current kernel.py)"]


def test_two_whole_files_under_one_description_are_two_variants():
    reply = f"DESCRIPTION: block sizes\n```python\n{FIXED}```\n```python\n{KERNEL}```\n"
    candidates, _ = parse(reply, current=KERNEL, limit=2)
    assert [c.description for c in candidates] == ["block sizes", "block sizes (variant 2)"]


def test_a_fix_applies_its_diff_to_the_failed_candidate_not_the_kept_version():
    failed = KERNEL.replace("    return x\n", "    return x +\n")
    failure = {"experiment": 7, "source": failed, "fix_turn": 0}
    reply = ("FIX OF: exp 7\nDESCRIPTION: finish the expression\n```diff\n@@ -14,1 +14,1 @@\n-    return x +\n"
             "+    return x + 0\n```\n")
    candidate = one(reply, failure=failure)
    assert candidate.fix_of == 7 and candidate.source == KERNEL.replace("    return x\n", "    return x + 0\n")
    with pytest.raises(ReplyError, match="failed candidate that may be fixed is exp 7"):
        one(reply.replace("exp 7", "exp 6"), failure=failure)
    with pytest.raises(ReplyError, match=f"had its {MAX_FIX_TURNS} fixes"):
        one(reply, failure={**failure, "fix_turn": MAX_FIX_TURNS})
    with pytest.raises(ReplyError, match="is none"):
        one(reply)


def test_code_with_a_syntax_error_is_still_a_proposal():
    broken = "def kernel_fn(x:\n    return\n"
    assert one(format_reply("broken on purpose", broken)).source == broken


@pytest.mark.parametrize("reply, complaint", [
    ("```python\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("DESCRIPTION:   \n```python\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("```python\n# DESCRIPTION: inside the code\n" + KERNEL + "```\n", "no `DESCRIPTION"),
    ("DESCRIPTION: faster\nHere is the idea, but no code.", "no ```python code block"),
    ("DESCRIPTION: faster\n```python\n\n```\n", "empty"),
    ("DESCRIPTION: faster\n```python\n" + KERNEL, "ended inside a code block"),
    ("DESCRIPTION: faster\n```diff\n@@ -1,1 +1,1 @@\n-not in the kernel\n+x\n```\n", "hunk 1 of the diff does not match"),
    ("DESCRIPTION: faster\n```diff\n--- a/bench.py\n+++ b/bench.py\n@@ -1 +1 @@\n-a\n+b\n```\n", "changes a/bench.py"),
    ("DESCRIPTION: x\n<<<<<<< SEARCH\nnot there\n=======\ny\n>>>>>>> REPLACE\n", "SEARCH text .* is not in"),
    ("DESCRIPTION: x\n<<<<<<< SEARCH\nreturn x\n=======\ny\n", "ended inside a code block"),
])
def test_malformed_replies_are_rejected_with_the_reason(reply, complaint):
    with pytest.raises(ReplyError, match=complaint.replace("(", r"\(").replace("```", "```")):
        parse(reply, current=KERNEL)


def test_truncated_reply_names_the_token_limit():
    with pytest.raises(ReplyError, match="token limit inside a code block"):
        parse("DESCRIPTION: faster\n```python\n" + KERNEL, current=KERNEL, truncated=True)
    with pytest.raises(ReplyError, match="the reply hit the token limit"):
        parse("DESCRIPTION: faster\nLet me think", current=KERNEL, truncated=True)


def test_description_is_one_bounded_line():
    assert one(format_reply("x" * 500, KERNEL)).description == "x" * 200
