"""Tests for autokernel/core/paths.py: the run's files follow the user (the git repository, or --workdir), the
tool's own files are found beside the package in a clone."""

import os
import subprocess
import sys
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
    assert paths.PROGRAM_MD.is_file() and (paths.TOOL_DIR / "verify.py").is_file()


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


# ---------------------------------------------------------------------- the package's own processes
def test_a_process_of_the_package_is_one_of_its_modules():
    assert paths.module_command("autokernel.judge.bench", "--quick")[-3:] == ["-m", "autokernel.judge.bench", "--quick"]
    with pytest.raises(ValueError, match="not a module of the autokernel package"):
        paths.module_command("bench")


def test_the_childs_import_path_puts_this_package_first_once(monkeypatch):
    assert paths.package_first(None) == str(CLONE)
    assert paths.package_first(os.pathsep.join(["/elsewhere", str(CLONE)])) == os.pathsep.join([str(CLONE), "/elsewhere"])
    # An installed package is in the interpreter's site folder: the child finds it there, and nothing is added.
    monkeypatch.setattr(paths, "_site_folders", lambda: {str(CLONE)})
    assert paths.package_first("/elsewhere") == "/elsewhere" and paths.package_first(None) is None
    assert "PYTHONPATH" not in paths.module_environment({"HOME": "/h"})


@pytest.mark.skipif(sys.version_info < (3, 11), reason="-P is Python 3.11's")
def test_a_module_planted_in_the_childs_working_folder_is_not_what_it_imports(tmp_path):
    # The working folder of a judge or a verify child is the user's project; with the file rules off a candidate can
    # write there. What it plants must not run in place of the package or the standard library.
    (tmp_path / "autokernel").mkdir()
    (tmp_path / "autokernel" / "__init__.py").write_text("print('planted package')\n")
    (tmp_path / "json.py").write_text("print('planted json')\n")
    probe = "import json, autokernel; print(autokernel.__file__)"
    env = paths.module_environment()
    ours = subprocess.run([sys.executable, *paths.SAFE_PATH_FLAGS, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True).stdout
    assert "planted" not in ours and ours.strip() == str(CLONE / "autokernel" / "__init__.py")
    # Without -P (as before it, and on Python 3.10) the working folder comes first, and what is planted there runs.
    plain = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True).stdout
    assert "planted json" in plain
