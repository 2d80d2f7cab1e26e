"""Tests for autokernel/verify/coverage.py and the report around it: a verify that routed no kernel call says
what it did not check and why, and is never a PASS (verification.EXIT_NOTHING_CHECKED)."""

import io

from rich.console import Console

from autokernel.verify import verification
from autokernel.verify.coverage import coverage
from autokernel.verify.report_record import VerifyReport
from autokernel.verify.verify_report import print_report
from tests.test_verify_report import wide_report

FELL_BACK = {"name": "1_rmsnorm_mlp", "hits": 0, "fallbacks": 8,
             "fallback_reasons": {"shape M=16,D=64,F=176 not verified": 8}}
NOT_FOUND = {"name": "2_region_ab12", "hits": 0, "fallbacks": 0, "fallback_reasons": {}}
TOOK_ONE = {"name": "3_softmax", "hits": 1, "fallbacks": 0, "fallback_reasons": {}}


def test_each_kernel_that_took_no_call_is_named_with_why():
    covered = coverage({"kernels": [FELL_BACK, NOT_FOUND],
                        "regions": [{"name": "2_region_ab12", "found": 0, "replaced": 0}]})
    assert covered.nothing and covered.calls_checked == 0
    assert covered.not_checked == [
        "1_rmsnorm_mlp: its 8 calls fell back to PyTorch: shape M=16,D=64,F=176 not verified (8x)",
        "2_region_ab12: its region is not in the model's graph"]
    partly = coverage({"kernels": [FELL_BACK, TOOK_ONE]})
    assert not partly.nothing and partly.calls_checked == 1 and len(partly.not_checked) == 1


def _report(*kernels) -> VerifyReport:
    data = wide_report().to_json()
    covered = coverage({"kernels": list(kernels)})
    data["checked"] = {**data["checked"], "kernels": list(kernels)}
    data["kernels"] = [{**kernel, "kernel_type": kernel["name"][2:], "share": None, "graph_op": None}
                       for kernel in kernels]
    data["correctness"].update(max_error=0.0, calls_checked=covered.calls_checked, not_checked=covered.not_checked)
    return VerifyReport.from_json(data)


def _printed(report: VerifyReport) -> str:
    stream = io.StringIO()
    print_report(report, Console(file=stream, width=1000, color_system=None))
    return stream.getvalue()


def test_a_check_that_routed_no_call_is_no_pass_and_exits_with_its_own_code():
    nothing = _report(FELL_BACK)
    assert nothing.passed and nothing.checked_nothing
    assert verification.exit_code(nothing) == verification.EXIT_NOTHING_CHECKED == 4
    out = _printed(nothing)
    assert "PASS" not in out and "every verified call routed" not in out
    assert "end-to-end error check: NOTHING CHECKED: no kernel took a call of this model" in out
    assert "not checked: 1_rmsnorm_mlp: its 8 calls fell back to PyTorch: shape M=16,D=64,F=176 not verified" in out

    some = _report(FELL_BACK, TOOK_ONE)
    assert verification.exit_code(some) == verification.EXIT_PASS
    out = _printed(some)
    assert "PASS: the model with every verified call routed (1 kernel call)" in out and "not checked: 1_rmsnorm_mlp" in out
    assert VerifyReport.from_json(some.to_json()) == some


def test_a_report_written_before_coverage_was_recorded_reads_as_checked():
    report = wide_report()          # its correctness has no calls_checked
    assert report.correctness.calls_checked is None and not report.checked_nothing
    assert verification.exit_code(report) == verification.EXIT_PASS
