"""Red team: what an agent's reply can do to the loop outside the sandbox (before any bench runs).

A reply's text goes into kernel.py, the commit message and results.tsv, and its source through
integrity.check_contract, all in the loop's own process: a character git's command line or UTF-8 cannot carry,
or source nested past the parser's depth, raised out of the loop and ended the run.
"""

import pytest

from autokernel.agents import reply
from autokernel.agents.base import Proposal
from autokernel.core.contracts import BenchResult
from autokernel.search import gitops, integrity, results
from autokernel.search.loop_records import LoopRecords
from tests.test_gitops import _subjects, project  # noqa: F401 (a fixture)

SOURCE = "KERNEL_TYPE = 'softmax'\n\ndef kernel_fn(x):\n    return x.softmax(-1)\n"
# A null byte (git's argv), a lone surrogate (JSON's \ud800: not UTF-8), a terminal escape, a bidi override.
HOSTILE = "faster\x00 --amend \ud800 \x1b[2J\u202edone"


def test_a_hostile_description_is_committed_and_recorded_as_a_printable_line(project, tmp_path):  # noqa: F811
    candidates, _ = reply.parse(f"DESCRIPTION: {HOSTILE}\nHYPOTHESIS: {HOSTILE}\n\n{reply.fenced(SOURCE)}\n",
                                current=SOURCE)
    description = LoopRecords._described(Proposal(candidates[0].description, candidates[0].source))
    assert description.isprintable() and candidates[0].hypothesis.isprintable()
    # The agent API takes Proposals from any agent: the loop's own one-line form is what makes it safe.
    assert LoopRecords._described(Proposal(HOSTILE, SOURCE)).isprintable()
    repo = gitops.KernelRepo(project)
    repo.commit_kernel(f"exp 1: {description}", "t")        # a null byte here raised ValueError out of the loop
    assert _subjects(project)[0] == "exp 1: faster --amend [2J done"
    tsv = tmp_path / "results.tsv"
    results.append_row(tsv, results.make_row(experiment=1, tag="t", kernel_type="softmax",
                                             result=BenchResult("FAIL"),
                                             description=description, status="revert", wall_seconds=1.0,
                                             llm_tokens=0))
    assert results.read_rows(tsv)[0]["description"] == description


def test_a_kernel_that_is_not_utf8_is_an_unreadable_reply():
    with pytest.raises(reply.ReplyError, match="not UTF-8"):
        reply.parse("DESCRIPTION: x\n\n" + reply.fenced(SOURCE + "x = 0  # \ud800") + "\n", current=SOURCE)


@pytest.mark.parametrize("source", [
    SOURCE + "x = " + "-" * 200_000 + "1\n",                 # the parser's own stack: MemoryError
    SOURCE + "x = " + "+".join(["1"] * 200_000) + "\n",      # RecursionError while building the tree
    "KERNEL_TYPE = " + "+".join(["a"] * 5000) + "\n" + SOURCE.split("\n", 1)[1],   # ast.unparse of the found value
    SOURCE + "x = '\ud800'\n",                               # not UTF-8: ast.parse raises UnicodeEncodeError
], ids=["deep-unary", "long-sum", "deep-kernel-type", "surrogate"])
def test_source_the_parser_cannot_hold_fails_the_contract_instead_of_the_loop(source):
    with pytest.raises(integrity.ContractError, match="cannot be read as Python"):
        integrity.check_contract(source, "softmax")
