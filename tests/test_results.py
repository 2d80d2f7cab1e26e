"""Tests for autokernel/search/results.py: the exact columns, appending, sanitizing, reading back and the summary."""

import pytest

from autokernel.core import contracts
from autokernel.search import results

PASS_RESULT = {"correctness": "PASS", "throughput": 812.25, "latency_us": 41.3, "pct_peak": 24.6,
               "speedup_vs_pytorch": 1.37, "speedup_vs_compile": 0.9, "timings_meaningful": True,
               "peak_vram_mb": 64.0, "message": None}


def _row(experiment, status, latency, kernel_type="softmax", description="try", correctness="PASS"):
    result = contracts.BenchResult.from_json(dict(PASS_RESULT, latency_us=latency, correctness=correctness))
    return results.make_row(experiment=experiment, tag="t1", kernel_type=kernel_type, result=result,
                            description=description, status=status, wall_seconds=3.5, llm_tokens=120)


def test_columns_are_exactly_the_documented_ones():
    assert results.COLUMNS == ("experiment", "tag", "kernel_type", "throughput", "latency_us", "pct_peak",
                               "speedup_vs_pytorch", "speedup_vs_compile", "correctness", "timings_meaningful",
                               "peak_vram_mb", "description", "status", "wall_seconds", "llm_tokens", "cost_usd",
                               "gpu", "llm_cached_tokens", "llm_reasoning_tokens", "reason")


def test_header_written_once_and_rows_read_back_typed(tmp_path):
    path = tmp_path / "results.tsv"
    results.append_row(path, _row(1, contracts.STATUS_BASELINE, 50.0))
    results.append_row(path, {**_row(2, contracts.STATUS_KEEP, 41.3), "llm_cached_tokens": 80,
                              "llm_reasoning_tokens": 15})
    lines = path.read_text().splitlines()
    assert lines[0] == "\t".join(results.COLUMNS)
    assert len(lines) == 3
    rows = results.read_rows(path)
    assert [r["experiment"] for r in rows] == [1, 2]
    assert rows[1] == {"experiment": 2, "tag": "t1", "kernel_type": "softmax", "throughput": 812.25,
                       "latency_us": 41.3, "pct_peak": 24.6, "speedup_vs_pytorch": 1.37, "speedup_vs_compile": 0.9,
                       "correctness": "PASS", "timings_meaningful": True, "peak_vram_mb": 64.0, "description": "try",
                       "status": "keep", "wall_seconds": 3.5, "llm_tokens": 120, "cost_usd": None, "gpu": None,
                       "llm_cached_tokens": 80, "llm_reasoning_tokens": 15, "reason": None}
    assert results.speedup_vs_best(rows[1]) == 0.9, "PyTorch's best is the faster of eager and compile"


def test_a_failure_has_a_short_reason_with_the_exception_and_where_in_kernel_py(tmp_path):
    traceback = ('Traceback (most recent call last):\n  File "/tmp/x/kernel.py", line 31, in kernel_fn\n'
                 '    return y + undefined\nNameError: name \'undefined\' is not defined\n')
    crash = contracts.BenchResult("CRASH", failed_stage="smoke", message=traceback)
    assert results.short_reason(crash) == "smoke: NameError: name 'undefined' is not defined (kernel.py:31)"
    wrong = contracts.BenchResult("FAIL", failed_stage="numerical", message="max error 0.31 > 0.01 at M=4\x1b[2J")
    assert results.short_reason(wrong) == "numerical: max error 0.31 > 0.01 at M=4 [2J"
    assert results.short_reason(contracts.BenchResult("TIMEOUT")) == "TIMEOUT"
    assert results.short_reason(contracts.BenchResult.from_json(PASS_RESULT)) == ""
    path = tmp_path / "results.tsv"
    results.append_row(path, results.make_row(experiment=4, tag="t1", kernel_type="softmax", result=crash,
                                              description="d", status="revert", wall_seconds=1.0, llm_tokens=0))
    assert results.read_rows(path)[0]["reason"] == "smoke: NameError: name 'undefined' is not defined (kernel.py:31)"


def test_missing_numbers_are_empty_cells_and_none(tmp_path):
    path = tmp_path / "results.tsv"
    crash = results.make_row(experiment=3, tag="t1", kernel_type="softmax", result=contracts.BenchResult("CRASH"),
                             description="bad", status=contracts.STATUS_REVERT, wall_seconds=0.5, llm_tokens=0)
    results.append_row(path, crash)
    row = results.read_rows(path)[0]
    assert row["latency_us"] is None and row["throughput"] is None
    assert row["correctness"] == "CRASH"
    assert row["llm_tokens"] == 0


def test_numbers_are_plain_decimals_never_exponents(tmp_path):
    # CPU interpreter latencies run to seconds, speedups down to ten-thousandths: both read as written.
    path = tmp_path / "results.tsv"
    row = _row(1, contracts.STATUS_BASELINE, 3388970.4)
    row.update(speedup_vs_pytorch=0.000026, throughput=0.00146611, pct_peak=0.0)
    results.append_row(path, row)
    cells = dict(zip(results.COLUMNS, path.read_text().splitlines()[1].split("\t")))
    assert (cells["latency_us"], cells["speedup_vs_pytorch"], cells["throughput"], cells["pct_peak"]) == (
        "3388970", "0.000026", "0.00146611", "0")
    assert "e+" not in path.read_text() and "e-" not in path.read_text()
    back = results.read_rows(path)[0]
    assert back["latency_us"] == 3388970.0 and back["speedup_vs_pytorch"] == 0.000026


def test_tabs_and_newlines_in_descriptions_are_sanitized(tmp_path):
    path = tmp_path / "results.tsv"
    results.append_row(path, _row(1, contracts.STATUS_REVERT, 60.0, description='fuse\tloads\nand "store"\r\n'))
    assert len(path.read_text().splitlines()) == 2
    assert results.read_rows(path)[0]["description"] == 'fuse loads and "store"'


def test_rows_are_on_disk_without_closing_anything(tmp_path):
    path = tmp_path / "results.tsv"
    results.append_row(path, _row(1, contracts.STATUS_BASELINE, 50.0))
    with open(path) as independent_reader:
        assert len(independent_reader.read().splitlines()) == 2


def test_unknown_column_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown columns"):
        results.append_row(tmp_path / "results.tsv", dict(_row(1, "keep", 1.0), speedup=2))


def test_foreign_header_is_refused(tmp_path):
    path = tmp_path / "results.tsv"
    path.write_text("commit\tval_bpb\n")
    with pytest.raises(results.ResultsFileError, match="move it aside"):
        results.append_row(path, _row(1, "keep", 1.0))
    with pytest.raises(results.ResultsFileError):
        results.read_rows(path)


def test_a_file_with_a_column_missing_is_refused_whole(tmp_path):
    """One header is read: a file without `reason` (an AutoKernel of another version) is neither read nor appended to."""
    path = tmp_path / "results.tsv"
    path.write_text("\t".join(results.COLUMNS[:-1]) + "\n" + "\t".join(
        results._cell(_row(1, "baseline", 50.0).get(c)) for c in results.COLUMNS[:-1]) + "\n")
    for use in (results.read_rows, results.check_writable, lambda p: results.append_row(p, _row(2, "keep", 40.0))):
        with pytest.raises(results.ResultsFileError, match="move it aside"):
            use(path)
    assert len(path.read_text().splitlines()) == 2
    results.check_writable(tmp_path / "absent.tsv")


def test_ensure_row_writes_a_decided_row_once(tmp_path):
    path = tmp_path / "results.tsv"
    assert results.ensure_row(path, _row(1, "baseline", 50.0))
    assert not results.ensure_row(path, _row(1, "baseline", 50.0))
    assert results.ensure_row(path, dict(_row(1, "baseline", 50.0), tag="other run"))
    assert [r["experiment"] for r in results.read_rows(path)] == [1, 1] and results.last_experiment(path) == 1


def test_no_file_reads_as_no_rows(tmp_path):
    assert results.read_rows(tmp_path / "absent.tsv") == []
    assert results.markdown_summary([]) == "No experiments recorded yet."


def test_summary_has_one_table_per_kernel_and_the_best_gain():
    rows = [_row(1, "baseline", 100.0), _row(2, "keep", 80.0), _row(3, "revert", 90.0, correctness="FAIL"),
            _row(4, "keep", 50.0, description="a|b"), _row(5, "baseline", 30.0, kernel_type="matmul"),
            _row(6, "revert", None, kernel_type="matmul", correctness="TIMEOUT")]
    text = results.markdown_summary(rows)
    overview = text.split("\n\n")[0].splitlines()
    assert overview[2].startswith("| softmax | t1 | 3 | 2 | 100.0 | 50.0 | 2.00x |")
    assert overview[3].startswith("| matmul | t1 | 1 | 0 | 30.0 | 30.0 | 1.00x |")
    assert "## softmax (t1, experiments 1-4)" in text
    assert "## matmul (t1, experiments 5-6)" in text
    assert "| 4 | keep | PASS | 50.0 | 1.37x | 120 | a\\|b |" in text
    assert "| 6 | revert | TIMEOUT |  | 1.37x | 120 | try |" in text


def test_a_baseline_opens_a_new_group_of_one_kernel():
    rows = [_row(1, "baseline", 100.0), _row(2, "keep", 80.0), _row(3, "baseline", 30.0, kernel_type="matmul"),
            _row(4, "revert", 90.0), _row(5, "baseline", 60.0), _row(6, "revert", 70.0)]
    assert [[r["experiment"] for r in group] for group in results.group_by_kernel(rows)] == [[1, 2, 4], [3], [5, 6]]


def test_the_best_version_is_the_fastest_kept_one_that_passed():
    group = [_row(1, "baseline", 100.0), _row(2, "keep", 80.0), _row(3, "revert", 50.0),
             _row(4, "keep", 60.0, correctness="FAIL"), _row(5, "keep", None)]
    assert results.best_version(group)["experiment"] == 2
    assert results.best_version([_row(1, "baseline", 100.0, correctness="FAIL"), _row(2, "revert", 90.0)]) is None


def test_a_tiny_cpu_speedup_keeps_its_digits_never_0_00x(tmp_path):
    path = tmp_path / "results.tsv"
    row = _row(1, contracts.STATUS_BASELINE, 3388970.4)
    row.update(speedup_vs_pytorch=0.0012)
    results.append_row(path, row)
    text = results.markdown_summary(results.read_rows(path))
    assert "0.0012x" in text and "0.00x" not in text
