"""Tests for autokernel/verify/verify_report.py: verify's printed report, whole in a log file or a pipe.

verify.py prints through report_console(); under nohup, in CI or from a parent reading a pipe its
stdout is no terminal, and rich's default there (80 columns) cut every wide cell ("torch.comp…").
"""

import io
import re

import pytest

from autokernel.core.contracts import ContractError
from autokernel.verify.report_record import VerifyReport
from autokernel.verify.variants import VARIANTS
from autokernel.verify.verify_report import PLAIN_OUTPUT_VARIABLE, print_report, report_console

SITE = "module layers.0.mlp.down_proj (Linear) inside the decoder's third residual block"


def _variant(ms: float) -> dict:
    return {"ms": ms, "latency": {"low_ms": ms * 0.97, "high_ms": ms * 1.04}, "error": 1.25e-3, "graph_breaks": 0,
            "graphs": 1, "failed": None}


def wide_report() -> VerifyReport:
    """A verify report, its cells wider than an 80-column table allows."""
    kernel = {"name": "1_rmsnorm_linear", "kernel_type": "rmsnorm_linear", "hits": 4, "fallbacks": 0, "share": 0.524,
              "graph_op": "autokernel::rmsnorm_linear_1_rmsnorm_linear", "fallback_reasons": {}}
    route = {"kernel": "1_rmsnorm_linear", "shape": {"M": 512, "N": 1000, "K": 64}, "site": SITE, "calls": 1,
             "ours_us": 1851227.4, "pytorch_us": 87.5, "ours_gpu_us": None, "compiled_gpu_us": None,
             "route_eager": False, "route_compiled": False}
    return VerifyReport.from_json({
        "model": "llama.py:Model", "device": "cpu", "dtype": "float32", "device_name": "cpu (Triton interpreter)",
        "inputs": [{"shape": [1, 8], "dtype": "int64"}], "versions": {"torch": "2.13.0", "triton": "3.7.0"},
        "optimized_dir": "optimized_kernels", "tolerance": 0.01,
        "checked": {"kernels": [{"name": "1_rmsnorm_linear", "hits": 4}], "module_routes": []},
        "kernels": [kernel], "plan": "plan: workspace/optimization_plan.json", "replaced_share": 0.524,
        "route_table": [route], "timings_meaningful": False, "selection": [],
        "variants": {name: _variant(7.787 + index) for index, name in enumerate(VARIANTS)},
        "headroom": None,
        "verdict": {"faster": False, "summary": "no gain: use torch.compile (7.787 ms)",
                    "pytorch_best": {"variant": "compile", "ms": 7.787}, "autokernel_best": None, "speedup": None,
                    "use": "compile", "use_code": "torch.compile(model)", "timings_meaningful": False,
                    "batch_norm_folding": False},
        "correctness": {"passed": True, "max_error": 1.2e-3, "variant_max_error": 1.3e-3, "tolerance": 0.01,
                        "definition": "max |ours - eager| / RMS(eager)"}})


def test_a_report_round_trips_through_its_json_and_a_malformed_one_is_refused():
    report = wide_report()
    assert VerifyReport.from_json(report.to_json()) == report
    assert report.passed and not report.faster and report.speedup is None
    assert "overhead" not in report.to_json()         # written only when measured (--overhead)
    with pytest.raises(ContractError, match="needs model"):
        VerifyReport.from_json({key: value for key, value in report.to_json().items() if key != "model"})
    with pytest.raises(ContractError, match="verdict or error check is malformed"):
        VerifyReport.from_json({**report.to_json(), "verdict": {"summary": "no use key"}})


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _printed(stream) -> str:
    print_report(wide_report(), report_console(stream))
    return stream.getvalue()


def _widest(text: str) -> int:
    return max(len(re.sub(r"\x1b\[[0-9;]*m", "", line)) for line in text.splitlines())


def test_tables_are_whole_when_the_output_is_no_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv(PLAIN_OUTPUT_VARIABLE, raising=False)
    text = _printed(io.StringIO())
    assert "…" not in text
    for cell in (SITE, "autokernel::rmsnorm_linear_1_rmsnorm_linear", "AutoKernel + torch.compile + CUDA graphs",
                 "7.787 [7.553-8.098]", "1851227.4"):
        assert cell in text, cell
    assert any(SITE in line and "1851227.4" in line for line in text.splitlines()), "one row, one line"


def test_a_terminal_keeps_its_width_and_a_parent_can_ask_for_plain_full_width_output(monkeypatch):
    monkeypatch.delenv(PLAIN_OUTPUT_VARIABLE, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    assert _widest(_printed(_Terminal())) <= 80
    # verify run as a child with its stdout on a pipe, by a parent that writes to a log
    monkeypatch.setenv(PLAIN_OUTPUT_VARIABLE, "1")
    plain = _printed(_Terminal())
    assert "…" not in plain and SITE in plain and "\x1b[" not in plain


@pytest.mark.parametrize("columns", ["100", "140"])
def test_columns_set_by_a_parent_is_the_width(monkeypatch, columns):
    monkeypatch.delenv(PLAIN_OUTPUT_VARIABLE, raising=False)
    monkeypatch.setenv("COLUMNS", columns)
    assert _widest(_printed(io.StringIO())) <= int(columns)


def test_a_region_kernel_is_shown_with_what_it_computes(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)      # pytest-xdist's workers set it: the table would wrap the name
    data = wide_report().to_json()
    data["checked"]["regions"] = [{"name": "1_rmsnorm_linear", "ops": ["addmm", "sigmoid", "sum"], "found": 1,
                                   "replaced": 1}]
    stream = io.StringIO()
    print_report(VerifyReport.from_json(data), report_console(stream))
    assert "gemm+sigmoid+sum (1_rmsnorm_linear)" in stream.getvalue()
    # Beside the table's "routed (measured)": on CPU "the kernels that took calls cover 0.0%" read as contradicting
    # the error check's "every verified call routed (1 kernel call)".
    assert "the kernels routed by measurement cover 52.4% of the profiled time" in stream.getvalue()


def test_the_batch_norms_folded_and_those_not_are_printed_with_why(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)      # pytest-xdist's workers set it: the line would wrap
    report = VerifyReport.from_json({**wide_report().to_json(), "batch_norm_folding": {
        "folds": ["stem.1 into stem.0"], "rejected": {"blocks.0.bn2": "blocks.0.conv2: its output is returned"},
        "eager": True, "compiled": False}})
    out = io.StringIO()
    print_report(report, report_console(out))
    assert ("batch norm folding: 1 folded, on eager; blocks.0.bn2 not folded: blocks.0.conv2: its output is "
            "returned") in out.getvalue()


def test_the_linears_concatenated_and_those_not_are_printed_with_why(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)      # pytest-xdist's workers set it: the line would wrap
    report = VerifyReport.from_json({**wide_report().to_json(), "linear_concat": {
        "groups": ["attn.q + attn.k + attn.v"], "rejected": {"mlp.up": "shares an input with mlp.gate but not ..."},
        "eager": False, "compiled": True}})
    out = io.StringIO()
    print_report(report, report_console(out))
    assert ("linear concatenation: 1 groups run as one GEMM each, on compiled; mlp.up not concatenated: shares an "
            "input with mlp.gate but not ...") in out.getvalue()
