"""Tests for autokernel/latency.py: medians of repeats with their spread; no CUDA graph without a GPU."""

import pytest
import torch

from autokernel import latency


def test_wall_clock_gives_the_median_and_range_of_its_repeats():
    calls = []
    figure = latency.wall_clock(lambda: calls.append(1), on_gpu=False, warmup=2)
    assert figure.repeats == 3 and len(calls) == 2 + 3          # warm-up calls, then one call per repeat
    assert figure.low_ms <= figure.median_ms <= figure.high_ms
    assert figure.to_json()["spread"] == round(figure.spread, 4)


def test_spread_and_microseconds():
    figure = latency.Latency(median_ms=2.0, low_ms=1.9, high_ms=2.1, repeats=5)
    assert figure.spread == pytest.approx(0.1) and figure.us == 2000.0


def test_graph_replay_needs_a_gpu():
    if not torch.cuda.is_available():
        assert latency.graph_replay(lambda: None) is None
