"""benchmarks/kernels.py fusion-check-mlp runs end to end (under the interpreter here), checking every output it times."""

import json

import pytest

from benchmarks import kernels
from benchmarks.suites import fusion_check_mlp


@pytest.mark.slow
def test_the_check_times_and_checks_every_implementation(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert kernels.main(["fusion-check-mlp", "--tokens", "3", "--dim", "32", "--hidden", "48", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["timings_meaningful"] is False and "timings mean nothing" in record["device"]
    (row,) = record["rows"]
    assert row["shape"] == "M=3,D=32,F=48,act=silu"
    assert set(row["ms"]) == set(row["tolerance_used"]) == set(fusion_check_mlp.IMPLEMENTATIONS)
    assert all(0 <= used <= 1.0 for used in row["tolerance_used"].values())
    assert "| M=3,D=32,F=48,act=silu |" in capsys.readouterr().out


def test_a_wrong_output_fails_the_check(tmp_path, monkeypatch):
    real = fusion_check_mlp.implementations

    def with_a_wrong_kernel(inputs):
        calls = real(inputs)
        right = calls["ours"]
        calls["ours"] = lambda: right() * 1.1
        return calls
    monkeypatch.setattr(fusion_check_mlp, "implementations", with_a_wrong_kernel)
    assert kernels.main(["fusion-check-mlp", "--tokens", "2", "--dim", "16", "--hidden", "16",
                         "--out", str(tmp_path / "x.json")]) == 1
