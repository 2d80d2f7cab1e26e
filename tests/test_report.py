"""Tests for autokernel/reports/report.py: report.md's numbers and progress.png, from a results.tsv written here."""

import json
import sys

import pytest

from autokernel.core.contracts import BenchResult
from autokernel.reports import report
from autokernel.search import results

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def add_row(path, experiment, kernel_type, status, correctness, speedup=None, throughput=None, latency=None,
            meaningful=True, vs_compile=None):
    result = BenchResult(correctness, speedup_vs_pytorch=speedup, speedup_vs_compile=vs_compile, throughput=throughput,
                         latency_us=latency, timings_meaningful=meaningful if correctness == "PASS" else None)
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
                (5, "matmul", "keep", "PASS", 1.5, 180.0, 5.0, True, 1.2),
                (6, "matmul", "revert", "CRASH"),
                (7, "matmul", "revert", "FAIL"),
                (8, "softmax", "baseline", "PASS", 1.0, 500.0, 3.0, True, 0.7),
                (9, "softmax", "revert", "TIMEOUT"),
                (10, "softmax", "revert", "PASS", 1.02, 505.0, 2.95)]:
        add_row(path, *row)
    return path


def test_markdown_has_each_kernels_numbers(results_tsv, tmp_path):
    markdown_path, png_path, _ = report.write_report(results_tsv, tmp_path / "out")
    text = markdown_path.read_text()
    assert ": 8 experiments and 2 baselines, in 2 kernel runs." in text
    # PyTorch's best is the faster of eager and torch.compile: the smaller of the two speedups.
    assert "| matmul | run1 | 6 | 2 | 1.50x | 1.20x | faster | 180 | FAIL 2, CRASH 1 |" in text
    # Nothing was kept for softmax: its best is the baseline, slower than torch.compile.
    assert "| softmax | run1 | 2 | 0 | 1.00x | 0.70x | no gain | 500 | TIMEOUT 1 |" in text
    assert f"]({png_path.name})" in text
    assert "## matmul (run1, experiments 1-7)" in text     # the per-experiment tables follow


def test_progress_png_is_a_real_image(results_tsv, tmp_path):
    png_path = report.write_report(results_tsv, tmp_path / "out").plot
    assert png_path == tmp_path / "out" / "progress.png"
    assert png_path.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    height, width, _ = matplotlib.image.imread(png_path).shape
    assert (width, height) == (1200, 680)       # 12 x (1.2 + 2.8 per kernel) inches at 100 dpi


def _points(axes, colour):
    from matplotlib.colors import to_hex

    found = []
    for collection in axes.collections:
        faces, edges = collection.get_facecolors(), collection.get_edgecolors()
        colours = {to_hex(c) for c in list(faces) + list(edges)}
        if colour in colours:
            found += [tuple(point) for point in collection.get_offsets()]
    return found


def test_the_plot_has_two_log_panels_per_kernel_and_tells_kept_reverted_and_failed_apart(results_tsv):
    groups = results.group_by_kernel(results.read_rows(results_tsv))
    figure = report.progress_figure(groups)
    (matmul_base, matmul_torch), (softmax_base, softmax_torch) = [figure.axes[i:i + 2] for i in (0, 2)]
    assert all(axes.get_yscale() == "log" for axes in figure.axes)
    assert [y for _, y in _points(matmul_base, report.KEPT)] == pytest.approx([1.0, 10 / 7, 2.0])
    assert [x for x, _ in _points(matmul_base, report.REVERTED)] == [4]
    assert sorted(x for x, _ in _points(matmul_base, report.FAILED)) == [3, 6, 7]
    # Exp 5 is 1.5x eager but 1.2x torch.compile: plotted against PyTorch's best, the slower of the two.
    assert [y for _, y in _points(matmul_torch, report.KEPT)] == pytest.approx([0.8, 1.2, 1.2])
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in matmul_torch.get_lines()), "the 1.0x line"
    assert "best 2.00x over its baseline" in matmul_base.get_title()
    assert "best 1.00x over its baseline" in softmax_base.get_title()
    assert figure._suptitle is None, "real GPU timings: no banner"


def test_a_cpu_run_gets_the_banner(tmp_path):
    path = tmp_path / "results.tsv"
    add_row(path, 1, "softmax", "baseline", "PASS", 0.01, 5.0, 300.0, meaningful=False)
    add_row(path, 2, "softmax", "keep", "PASS", 0.028, 14.0, 107.0, meaningful=False)
    figure = report.progress_figure(results.group_by_kernel(results.read_rows(path)))
    assert figure._suptitle.get_text() == report.NOT_MEANINGFUL
    assert report.NOT_MEANINGFUL in report.markdown_report(results.read_rows(path), [], path)
    # the run's plan says it was profiled on CPU (state.json's plan_caveats): the report says so too
    written = report.write_report(path, tmp_path / "out", plan_caveats=["profiled on CPU: CPU op times"])
    assert "> The plan: profiled on CPU: CPU op times" in written.markdown.read_text()


def test_a_cpu_run_is_never_called_faster_or_winner_only_correct_with_its_speed_unknown(tmp_path):
    path = tmp_path / "results.tsv"
    # Interpreter times that would read as a 3x "win" over PyTorch, and a 0.00026x "loss".
    add_row(path, 1, "softmax", "baseline", "PASS", 0.01, 3.0, 300.0, meaningful=False)
    add_row(path, 2, "rmsnorm", "baseline", "PASS", 0.01, 0.00026, 3.0e6, meaningful=False)
    rows = results.read_rows(path)
    text = report.markdown_report(rows, results.group_by_kernel(rows), path)
    table_rows = [line for line in text.splitlines() if line.startswith(("| softmax", "| rmsnorm"))][:2]
    assert all("| correct; speed unknown on CPU |" in line for line in table_rows), table_rows
    assert "| faster |" not in text and "| no gain |" not in text and "winner" not in text
    assert [kernel["outcome"] for kernel in report.summary_json(rows)["kernels"]] == [
        "correct; speed unknown on CPU"] * 2


def test_report_md_leads_with_the_end_to_end_verdict(results_tsv, tmp_path):
    verify = tmp_path / "verify_report.json"
    verify.write_text(json.dumps({"verdict": {
        "summary": "AutoKernel + torch.compile (CUDA graphs) is 1.12x faster than PyTorch's best",
        "pytorch_best": {"variant": "compile_cudagraphs", "name": "torch.compile (CUDA graphs)", "ms": 2.24},
        "autokernel_best": {"variant": "AutoKernel + torch.compile", "ms": 2.0}, "speedup": 1.12,
        "timings_meaningful": True}, "runs": ["run1"], "other": "ignored"}))
    markdown_path = report.write_report(results_tsv, tmp_path / "out", verify_report=verify).markdown
    text = markdown_path.read_text()
    assert text.index("is 1.12x faster than PyTorch's best") < text.index("| matmul | run1 |")
    assert "| PyTorch's best | torch.compile (CUDA graphs) | 2.240 |" in text
    verify.write_text(json.dumps({"rows": []}))          # an older report, without a verdict
    assert report.read_verdict(verify) is None and report.read_verdict(tmp_path / "absent.json") is None
    text = report.write_report(results_tsv, tmp_path / "out", verify_report=verify)[0].read_text()
    assert "End to end" not in text


def test_the_json_summary_matches_the_tables(results_tsv):
    summary = report.summary_json(results.read_rows(results_tsv))
    matmul, softmax = summary["kernels"]
    assert (matmul["count"], matmul["kept"], matmul["speedup_over_baseline"]) == (7, 2, 2.0)
    assert matmul["failures"] == {"FAIL": 2, "CRASH": 1} and softmax["failures"] == {"TIMEOUT": 1}
    assert summary["verdict"] is None and summary["experiments"] == 10


def test_errors_say_what_is_missing(tmp_path, results_tsv):
    with pytest.raises(report.ReportError, match="no experiments"):
        report.write_report(tmp_path / "absent.tsv", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_without_matplotlib_report_md_is_still_written_and_says_why_there_is_no_plot(tmp_path, results_tsv,
                                                                                     monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    written = report.write_report(results_tsv, tmp_path / "out")
    assert written.plot is None and "pip install matplotlib" in written.plot_problem
    text = written.markdown.read_text()
    assert "| matmul |" in text and "progress.png" in text and "](progress.png)" not in text
    assert "No plot: progress.png needs matplotlib" in text
    assert not (tmp_path / "out" / report.PLOT_FILE).exists()


def test_the_report_gives_each_gpus_pace_and_idle_time():
    from autokernel.core.throughput import GpuUse, Throughput

    throughput = Throughput(wall_s=1800.0, gpus={"gpu0": GpuUse(experiments=50, busy_s=1700.0),
                                                 "gpu1": GpuUse(experiments=40, busy_s=1200.0)})
    text = "\n".join(report.throughput_lines(throughput))
    assert "180.0 experiments/hour overall" in text
    assert "| gpu0 | 50 | 100.0 | 28m20s | 1m40s |" in text and "| gpu1 | 40 | 80.0 | 20m00s | 10m00s |" in text
    assert report.throughput_lines(None) == [] and report.throughput_lines(Throughput()) == []
    assert report.summary_json([], None, throughput)["throughput"]["gpus"]["gpu1"]["experiments"] == 40


def test_the_report_says_when_each_job_was_in_flight_and_where():
    from autokernel.core.throughput import GpuUse, JobSpan, Throughput

    throughput = Throughput(wall_s=600.0, gpus={"gpu0": GpuUse(experiments=9, busy_s=590.0)},
                            jobs={"2_reduce": JobSpan(started_s=60.0, ended_s=None, benches={"gpu1": 4}),
                                  "1_softmax": JobSpan(started_s=0.0, ended_s=300.0, benches={"gpu1": 2, "gpu0": 7}),
                                  "3_matmul": JobSpan(started_s=300.0, ended_s=500.0, benches={"gpu0": 3})})
    text = "\n".join(report.throughput_lines(throughput))
    assert "| 1_softmax | 0m00s | 5m00s | gpu0 7, gpu1 2 |" in text
    assert "| 2_reduce | 1m00s | open (--resume goes on) | gpu1 4 |" in text
    assert text.index("| 1_softmax") < text.index("| 2_reduce") < text.index("| 3_matmul"), "in the order they opened"
    assert "up to 2 jobs were in flight at once" in text
    assert "Jobs in flight" not in "\n".join(report.throughput_lines(Throughput(wall_s=60.0, gpus=throughput.gpus)))


def test_report_md_shows_each_failure_with_its_reason_and_the_runs_cost(tmp_path):
    path = tmp_path / "results.tsv"
    crash = BenchResult("CRASH", failed_stage="smoke", message="Traceback ...\nNameError: name 'y' is not defined")
    for experiment, result, tokens, cost in [(1, BenchResult("PASS", latency_us=5.0, timings_meaningful=True), 0, None),
                                             (2, crash, 120, 0.0396), (3, BenchResult("FAIL"), 80, None)]:
        results.append_row(path, results.make_row(
            experiment=experiment, tag="night", kernel_type="softmax", result=result, description=f"try|{experiment}",
            status="baseline" if experiment == 1 else "revert", wall_seconds=1.0, llm_tokens=tokens, cost_usd=cost))
    text = report.write_report(path, tmp_path / "out").markdown.read_text()
    assert "| 2 | night | softmax | CRASH | smoke: NameError: name 'y' is not defined | try\\|2 |" in text
    assert "| 3 | night | softmax | FAIL | FAIL | try\\|3 |" in text
    assert "| night | 200 | 0 | 0 | $0.0396 + 1 reply without a price |" in text
    assert "workspace/runs/<run>.jsonl" in text


def test_one_experiment_is_one_experiment(tmp_path):
    path = tmp_path / "results.tsv"
    add_row(path, 1, "softmax", "baseline", "PASS", 0.0012, 1.0, 5.0, False)
    text = report.write_report(path, tmp_path / "out").markdown.read_text()
    assert f"1 row from `{path}`: 0 experiments and 1 baseline, in 1 kernel run." in text and "0.0012x" in text and "0.00x" not in text
    assert "## softmax (run1, experiment 1)" in text


def test_a_region_kernel_is_named_by_its_ops_first_in_the_tables(tmp_path):
    # Its type is a hash; the run's jobs say what it computes, and the report says that first.
    path = tmp_path / "results.tsv"
    add_row(path, 1, "region_f151ae23", "baseline", "PASS", 1.0, 10.0, 5.0)
    add_row(path, 2, "region_f151ae23", "revert", "FAIL")
    text = report.write_report(path, tmp_path / "out", titles={"region_f151ae23": "gemm+add"}).markdown.read_text()
    assert "| gemm+add (region_f151ae23) | run1 | 1 |" in text
    assert "| 2 | run1 | gemm+add (region_f151ae23) | FAIL |" in text
    assert "## gemm+add (region_f151ae23) (run1, experiments 1-2)" in text


def test_a_verify_of_another_runs_kernels_is_not_shown_as_this_runs(results_tsv, tmp_path):
    # After a second run, report.md led with the first run's verdict as if it were the new run's.
    verify = tmp_path / "verify_report.json"
    verdict = {"summary": "no gain: use torch.compile", "pytorch_best": None, "autokernel_best": None, "speedup": None,
               "timings_meaningful": True}
    for runs in (["run0"], None):            # another run's kernels; a report that does not say whose
        verify.write_text(json.dumps({"verdict": verdict, **({"runs": runs} if runs else {})}))
        text = report.write_report(results_tsv, tmp_path / "out", verify_report=verify).markdown.read_text()
        assert "no gain: use torch.compile" not in text
        assert "Run run1 is not verified yet: the last verify checked the kernels of " in text
        assert report.summary_json(results.read_rows(results_tsv), report.read_verdict(verify))["verdict"] is None
