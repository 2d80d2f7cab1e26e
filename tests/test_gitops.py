"""Tests for autokernel/gitops.py in a throwaway git repository."""

import subprocess

import pytest

from autokernel import gitops


def _git(root, *args) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path, monkeypatch):
    # No global or system git config: the repo must work without a configured identity.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    root = tmp_path / "project"
    root.mkdir()
    (root / "bench.py").write_text("judge\n")
    (root / "kernel.py").write_text("v0\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return root


def _subjects(root) -> list[str]:
    return _git(root, "log", "--format=%s").splitlines()


def test_dirty_tracked_files_are_listed_and_refused(project):
    repo = gitops.KernelRepo(project)
    (project / "untracked.txt").write_text("fine\n")
    repo.ensure_clean()
    (project / "bench.py").write_text("edited\n")
    with pytest.raises(gitops.GitOpsError, match=r"uncommitted changes \(bench.py\)"):
        repo.ensure_clean()


def test_experiment_commit_and_revert_touch_only_kernel_py(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("night1")
    assert repo.current_branch() == "autokernel/night1"
    kept = repo.head()
    (project / "kernel.py").write_text("v1\n")
    (project / "notes.txt").write_text("user file\n")
    experiment = repo.commit_kernel("exp 1: faster")
    assert _git(project, "show", "--name-only", "--format=", experiment).split() == ["kernel.py"]
    assert _subjects(project)[0] == "exp 1: faster"
    repo.reset_hard(kept)
    assert (project / "kernel.py").read_text() == "v0\n"
    assert (project / "notes.txt").read_text() == "user file\n"
    assert _subjects(project) == ["init"]


def test_unchanged_candidate_still_gets_its_commit(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("same")
    repo.commit_kernel("exp 1: identical")
    assert _subjects(project)[0] == "exp 1: identical"


def test_commit_optimized_stages_the_folder(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("save")
    (project / "optimized_kernels").mkdir()
    (project / "optimized_kernels" / "1_softmax.py").write_text("best\n")
    (project / "optimized_kernels" / "manifest.json").write_text("{}\n")
    (project / "kernel.py").write_text("not part of this commit\n")
    sha = repo.commit_optimized("save 1_softmax")
    assert sorted(_git(project, "show", "--name-only", "--format=", sha).split()) == [
        "optimized_kernels/1_softmax.py", "optimized_kernels/manifest.json"]
    assert repo.uncommitted_tracked_files() == ["kernel.py"]


def test_existing_branch_needs_resume(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("twice")
    _git(project, "checkout", "-q", "main")
    with pytest.raises(gitops.GitOpsError, match="--resume"):
        repo.start_branch("twice")
    repo.checkout_branch("twice")
    assert repo.current_branch() == "autokernel/twice"
    with pytest.raises(gitops.GitOpsError, match="no run 'other' to resume"):
        repo.checkout_branch("other")


def test_file_at_reads_committed_text_exactly(project):
    repo = gitops.KernelRepo(project)
    first = repo.head()
    (project / "kernel.py").write_text("v1\n\n")
    repo.start_branch("read")
    repo.commit_kernel("exp 1")
    assert repo.file_at(first, "kernel.py") == "v0\n"
    assert repo.file_at(repo.head(), "kernel.py") == "v1\n\n"


def test_not_a_repository_is_a_clear_error(tmp_path):
    with pytest.raises(gitops.GitOpsError, match="not a git repository"):
        gitops.KernelRepo(tmp_path)
