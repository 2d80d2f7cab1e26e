"""Tests for autokernel/report.py: report.md's numbers and progress.png, from a results.tsv written here."""

import sys

import pytest

from autokernel import report, results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def add_row(path, experiment, kernel_type, status, correctness, speedup=None, throughput=None, latency=None):
    result = {"correctness": correctness, "speedup_vs_pytorch": speedup, "throughput": throughput,
              "latency_us": latency}
    results.append_row(path, results.make_row(experiment=experiment, tag="run1", kernel_type=kernel_type,
                                              result=result, description=f"exp {experiment}", status=status,
                                              wall_seconds=2.0, llm_tokens=100))


@pytest.fixture
def results_tsv(tmp_path):
    path = tmp_path / "results.tsv"
    for row in [(1, "matmul", "baseline", "PASS", 0.8, 100.0, 10.0),
                (2, "matmul", "keep", "PASS", 1.2, 150.0, 7.0),
                (3, "matmul", "revert", "FAIL"),
                (4, "matmul", "revert", "PASS", 1.1, 140.0, 8.0),      # passes, but not faster than the best
                (5, "matmul", "keep", "PASS", 1.5, 180.0, 5.0),
                (6, "matmul", "revert", "CRASH"),
                (7, "matmul", "revert", "FAIL"),
                (8, "softmax", "baseline", "PASS", 1.0, 500.0, 3.0),
                (9, "softmax", "revert", "TIMEOUT"),
                (10, "softmax", "revert", "PASS", 1.02, 505.0, 2.95)]:
        add_row(path, *row)
    return path


def test_markdown_has_each_kernels_numbers(results_tsv, tmp_path):
    markdown_path, png_path = report.write_report(results_tsv, tmp_path / "out")
    text = markdown_path.read_text()
    assert "10 experiments from" in text and "2 kernel runs" in text
    assert "| matmul | run1 | 7 | 2 | 1.50x | 180 | FAIL 2, CRASH 1 |" in text
    # Nothing was kept for softmax: its best is the baseline.
    assert "| softmax | run1 | 3 | 0 | 1.00x | 500 | TIMEOUT 1 |" in text
    assert f"]({png_path.name})" in text
    assert "## matmul (run1, experiments 1-7)" in text     # the per-experiment tables follow


def test_progress_png_is_a_real_image(results_tsv, tmp_path):
    _, png_path = report.write_report(results_tsv, tmp_path / "out")
    assert png_path == tmp_path / "out" / "progress.png"
    assert png_path.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(png_path).shape
    assert (width, height) == (1200, 660)       # 10 x 5.5 inches at 120 dpi


def test_errors_say_what_is_missing(tmp_path, results_tsv, monkeypatch):
    with pytest.raises(report.ReportError, match="no experiments"):
        report.write_report(tmp_path / "absent.tsv", tmp_path / "out")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(report.ReportError, match="pip install matplotlib"):
        report.write_report(results_tsv, tmp_path / "out")
