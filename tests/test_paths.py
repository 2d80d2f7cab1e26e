"""Tests for autokernel/core/paths.py: the run's files follow the user (the git repository, or --workdir), the
tool's own files are found beside the package in a clone."""

from pathlib import Path

import pytest

from autokernel import cli
from autokernel.core import paths

CLONE = Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_paths(monkeypatch):
    monkeypatch.delenv(paths.WORKDIR_VARIABLE, raising=False)
    yield
    monkeypatch.delenv(paths.WORKDIR_VARIABLE, raising=False)
    paths.use_workdir()


def test_in_the_clone_the_tool_files_are_the_clones():
    assert paths.IN_CLONE and paths.TOOL_DIR == CLONE
    assert paths.BENCH_SCRIPT == CLONE / "bench.py" and paths.starter_path("softmax") == CLONE / "kernels" / "softmax.py"
    assert paths.PROGRAM_MD.is_file() and paths.script("verify.py").is_file()


def test_the_run_files_live_in_the_git_repository_the_command_runs_in(tmp_path, monkeypatch, restore_paths):
    repo = tmp_path / "user_repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(repo / "src" / "deep")
    assert paths.use_workdir() == repo
    assert (paths.KERNEL_FILE, paths.WORKSPACE, paths.RESULTS_TSV) == (repo / "kernel.py", repo / "workspace",
                                                                       repo / "results.tsv")
    assert paths.MANIFEST_FILE == repo / "optimized_kernels" / "manifest.json"
    assert paths.BENCH_SCRIPT == CLONE / "bench.py"          # the judge stays the tool's own


def test_outside_any_repository_a_clone_keeps_its_own_layout(tmp_path, monkeypatch, restore_paths):
    monkeypatch.chdir(tmp_path)
    assert paths.use_workdir() == CLONE


def test_a_named_folder_wins_and_children_inherit_it(tmp_path, monkeypatch, restore_paths):
    monkeypatch.chdir(CLONE)
    assert paths.use_workdir(tmp_path / "elsewhere") == (tmp_path / "elsewhere").resolve()
    assert paths.find_workdir() == (tmp_path / "elsewhere").resolve()       # through the environment


def test_cli_workdir_points_status_at_that_folder(tmp_path, monkeypatch, capsys, restore_paths):
    monkeypatch.chdir(CLONE)
    assert cli.main(["--workdir", str(tmp_path), "status"]) == 0
    assert paths.WORKSPACE == tmp_path.resolve() / "workspace"
    assert "no run" in capsys.readouterr().out.lower()
    assert cli.main(["status", "--workdir", str(tmp_path / "missing")]) == cli.EXIT_ERROR
    assert "is not a folder" in capsys.readouterr().err
