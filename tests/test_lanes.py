"""Tests for autokernel/search/lanes.py: what the live view says of the jobs in flight and their GPUs."""

from autokernel.agents.base import Proposal
from autokernel.core.contracts import Job
from autokernel.core.run_records import JobProgress
from autokernel.search.lanes import Flight, Lane, lanes_line

LABELS = ["gpu0", "gpu1", "gpu2"]


def _job(rank: int, kind: str) -> Job:
    return Job(rank=rank, kernel_type=kind, dtype="float32", shapes=[{"M": 4}], path=f"k{rank}.py")


def _flight(description: str) -> Flight:
    return Flight(Proposal(description, "source"), description, started=0.0, clipped=False)


def test_each_job_in_flight_says_what_it_is_doing_and_on_which_gpus():
    progress = JobProgress(baseline={}, best={}, noise=0.02)
    judging = Lane(0, _job(1, "softmax"), progress=progress, flights={2: _flight("a"), 0: _flight("b")})
    baseline = Lane(1, _job(2, "reduce"), runs=[{"correctness": "PASS"}], baseline_slot=1)
    ending = Lane(2, _job(3, "matmul"), progress=progress, flights={1: _flight("c")}, stop="3 reverts in a row")
    idle = Lane(3, _job(4, "rmsnorm"), progress=progress)
    assert judging.busy and baseline.busy and ending.busy and not idle.busy
    assert lanes_line([judging, baseline, ending, idle], LABELS) == (
        "1_softmax: 2 candidates on gpu0, gpu2; 2_reduce: baseline run 2 of 2 on gpu1; "
        "3_matmul: 1 candidate on gpu1, then it ends (3 reverts in a row); 4_rmsnorm: waiting for a GPU")
    assert lanes_line([], LABELS) == "-"


def test_a_job_whose_agent_is_being_asked_says_so_and_is_busy():
    progress = JobProgress(baseline={}, best={}, noise=0.02)
    asking = Lane(0, _job(1, "softmax"), progress=progress, asking=True)
    judging_and_asking = Lane(1, _job(2, "reduce"), progress=progress, flights={1: _flight("a")}, asking=True)
    ending = Lane(2, _job(3, "matmul"), progress=progress, asking=True, stop="3 reverts in a row")
    assert asking.busy and ending.busy, "a job whose reply is out neither ends nor gives up its place"
    assert lanes_line([asking, judging_and_asking, ending], LABELS) == (
        "1_softmax: waiting on the agent; 2_reduce: 1 candidate on gpu1, waiting on the agent for the next; "
        "3_matmul: waiting on the agent, then it ends (3 reverts in a row)")
