"""Tests for autokernel/core/throughput.py: the run's pace round-trips through state.json, older states included."""

from autokernel.core.throughput import GpuUse, JobSpan, Throughput


def test_the_pace_and_the_jobs_spans_round_trip_and_an_older_state_reads_without_spans():
    pace = Throughput(wall_s=7200.0, gpus={"gpu0": GpuUse(experiments=30, busy_s=7000.0)},
                      jobs={"1_softmax": JobSpan(started_s=0.0, ended_s=3600.0, benches={"gpu0": 20}),
                            "2_reduce": JobSpan(started_s=1800.0)})
    assert Throughput.from_json(pace.to_json()) == pace
    assert pace.experiments_per_hour() == 15.0 and pace.idle_s("gpu0") == 200.0 and pace.idle_s("gpu9") == 7200.0
    older = Throughput.from_json({"wall_s": 30.0, "gpus": {"cpu": {"experiments": 2, "busy_s": 20.0}}})
    assert older.jobs == {} and older.gpu("cpu").experiments == 2 and older.experiments_per_hour() is None
