"""Red team: what verify's sandboxed child hands back to the user's process (autokernel/verify/isolated.py).

The child imported the kept kernels, so its JSON and its output folder are theirs to write. The user's process
must copy only files it asked for, from inside that folder, record only route tables, and report anything else
as an error: a traceback (a list where an object was due) is the least of it.
"""

import json
import os

import pytest

from autokernel.verify import handover, isolated
from autokernel.verify.verification import EXIT_ERROR


class _Child:
    timed_out, stderr = False, ""

    def exit_description(self) -> str:
        return "exited"


def _verify(tmp_path, monkeypatch, child, *, starters=False) -> int:
    """verify_in_sandbox with `child(out)` standing in for the sandboxed child: it fills out, returns its JSON."""
    optimized = tmp_path / "optimized"
    optimized.mkdir()
    (optimized / "manifest.json").write_text(json.dumps({"kernels": {"k": {"file": "k.py"}}}))

    def run_sandboxed(cmd, **_):
        return _Child(), child(tmp_path / cmd[cmd.index("--write-to") + 1])
    monkeypatch.setattr(isolated, "_run_sandboxed", run_sandboxed)
    return isolated.verify_in_sandbox([], model=None, workspace=tmp_path / "ws", optimized_dir=optimized,
                                      starters=starters, say=lambda line: None)


def test_a_folder_linked_out_of_the_childs_folder_hands_back_nothing(tmp_path, monkeypatch):
    # The child's Landlock hides the home folder; a link it makes is followed by the user's process, which can read it.
    hidden = tmp_path / "home" / "project"
    hidden.mkdir(parents=True)
    (hidden / "settings.py").write_text("API_KEY = 'sk-secret'\n")

    def child(out):
        os.symlink(hidden, out / "starter_kernels")
        return {"exit_code": 0, "made": ["starter_kernels/settings.py"]}
    assert _verify(tmp_path, monkeypatch, child, starters=True) == 0
    assert not (tmp_path / "ws" / "starter_kernels" / "settings.py").exists()


def test_verify_of_kept_kernels_cannot_plant_starter_kernels(tmp_path, monkeypatch):
    # A later plug_in of starter_kernels/ (code Inductor wrote, the user thinks) would import this in their process.
    def child(out):
        (out / "starter_kernels").mkdir()
        (out / "starter_kernels" / "manifest.json").write_text('{"kernels": {"s": {"file": "evil.py"}}}')
        (out / "starter_kernels" / "evil.py").write_text("import os; os.system('payload')\n")
        (out / "verify_report.json").write_text("{}")
        return {"exit_code": 0, "made": ["starter_kernels/manifest.json", "starter_kernels/evil.py",
                                         "verify_report.json"], "tables_for": "starters",
                "route_tables": {"s": {"source_sha256": "x", "device": "cpu", "records": []}}}
    assert _verify(tmp_path, monkeypatch, child) == 0
    assert sorted(path.name for path in (tmp_path / "ws").rglob("*")) == ["verify_report.json"]


@pytest.mark.parametrize("answer", [
    {"exit_code": 0, "made": [1]},
    {"exit_code": 0, "made": {"verify_report.json": 1}},
    {"exit_code": 0, "route_tables": ["k"]},
    {"exit_code": 0, "route_tables": {"k": {}}},
    {"exit_code": 0, "route_tables": {"k": {"source_sha256": "s", "device": "cpu", "records": [{}]}}},
    {"exit_code": 0, "route_tables": {"k": {"source_sha256": "s", "device": "cpu", "records": ["x"]}}},
    {"exit_code": True},
], ids=["name-not-str", "made-not-list", "tables-not-object", "table-empty", "record-empty", "record-not-object",
        "exit-code-bool"])
def test_a_malformed_answer_is_an_error_not_a_traceback(tmp_path, monkeypatch, answer):
    assert _verify(tmp_path, monkeypatch, lambda out: answer) == EXIT_ERROR
    assert "route_table" not in (tmp_path / "optimized" / "manifest.json").read_text()


def test_route_tables_that_are_not_are_refused_before_the_manifest_is_touched(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"kernels": {"k": {"file": "k.py"}}}')
    with pytest.raises(ValueError, match="not a record|not one"):
        handover.record_route_tables(manifest, {"k": {"source_sha256": "s", "device": "cpu", "records": [[]]}})
    assert manifest.read_text() == '{"kernels": {"k": {"file": "k.py"}}}'


_VERDICT = {"summary": "no gain: use torch.compile", "pytorch_best": None, "autokernel_best": None, "speedup": None,
            "use": "compile", "use_code": "torch.compile(model)", "faster": False, "timings_meaningful": False,
            "batch_norm_folding": False, "linear_concat": False}
_COMPARED = {"checked": {"passed": True, "max_error": 0.0}, "tolerance": 1e-2, "verdict": _VERDICT}


@pytest.mark.parametrize("compared", [
    {**_COMPARED, "checked": {"passed": "False", "max_error": 9.0}},
    {**_COMPARED, "tolerance": "1e9"},
    {**_COMPARED, "verdict": {**_VERDICT, "use": "os.system"}},
    {**_COMPARED, "verdict": {"summary": "faster", "use": "ours"}},
    {**_COMPARED, "verdict": {**_VERDICT, "faster": "yes"}},
    {key: value for key, value in _COMPARED.items() if key != "checked"},
    {**_COMPARED, "verdict": {**_VERDICT, "batch_norm_folding": "yes"}},
    {**_COMPARED, "verdict": {**_VERDICT, "linear_concat": 1}},
    {**_COMPARED, "verdict": {k: v for k, v in _VERDICT.items() if k != "linear_concat"}},
], ids=["passed-not-bool", "tolerance-not-number", "use-not-a-variant", "verdict-short", "faster-not-bool",
        "no-check", "folding-not-bool", "concat-not-bool", "concat-missing"])
def test_a_comparison_that_is_not_one_fails_the_sandboxed_check(tmp_path, monkeypatch, compared):
    """autokernel.optimize's check runs the kept kernels in the child: what it sends back is read as data, checked,
    and anything else fails the check (optimize then hands back PyTorch's own path), never a KeyError or a string
    "False" read as a pass."""
    monkeypatch.setattr(isolated, "_run_sandboxed", lambda cmd, **_: (_Child(), {"compared": compared}))
    with pytest.raises(isolated.SandboxedCheckFailed, match="a comparison that is not one"):
        isolated.compare_in_sandbox(None, (), tmp_path, on_gpu=False, compile_backend=None, log=lambda line: None)
    monkeypatch.setattr(isolated, "_run_sandboxed", lambda cmd, **_: (_Child(), {"compared": _COMPARED}))
    assert isolated.compare_in_sandbox(None, (), tmp_path, on_gpu=False, compile_backend=None,
                                       log=lambda line: None) == _COMPARED
