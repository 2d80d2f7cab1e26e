"""Tests for autokernel/search/gitops.py in a throwaway git repository."""

import subprocess

import pytest

from autokernel.search import gitops


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
    experiment = repo.commit_kernel("exp 1: faster", "t")
    assert _git(project, "show", "--name-only", "--format=", experiment).split() == ["kernel.py"]
    assert _subjects(project)[0] == "exp 1: faster"
    repo.reset_hard(kept)
    assert (project / "kernel.py").read_text() == "v0\n"
    assert (project / "notes.txt").read_text() == "user file\n"
    assert _subjects(project) == ["init"]


def test_unchanged_candidate_still_gets_its_commit(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("same")
    repo.commit_kernel("exp 1: identical", "t")
    assert _subjects(project)[0] == "exp 1: identical"


def test_commit_optimized_stages_the_folder(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("save")
    (project / "optimized_kernels").mkdir()
    (project / "optimized_kernels" / "1_softmax.py").write_text("best\n")
    (project / "optimized_kernels" / "manifest.json").write_text("{}\n")
    (project / "kernel.py").write_text("not part of this commit\n")
    sha = repo.commit_optimized("save 1_softmax", "t")
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
    repo.commit_kernel("exp 1", "t")
    assert repo.file_at(first, "kernel.py") == "v0\n"
    assert repo.file_at(repo.head(), "kernel.py") == "v1\n\n"


def test_not_a_repository_is_a_clear_error(tmp_path):
    with pytest.raises(gitops.GitOpsError, match="not a git repository"):
        gitops.KernelRepo(tmp_path)


def test_commits_carry_the_run_trailer_and_a_users_commit_does_not(project):
    repo = gitops.KernelRepo(project)
    repo.start_branch("night")
    base = repo.head()
    (project / "kernel.py").write_text("v1\n")
    repo.commit_kernel("exp 1: ours", "night")
    (project / "notes.txt").write_text("mine\n")
    _git(project, "add", "notes.txt")
    _git(project, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-q", "-m", "theirs")
    assert [(c.subject, c.run_tag) for c in repo.commits_after(base)] == [("theirs", None), ("exp 1: ours", "night")]
    assert repo.is_ancestor(base, "HEAD") and not repo.is_ancestor("HEAD", base)
    assert repo.changed_files(base) == ["kernel.py", "notes.txt"]


def test_git_commands_ignore_config_a_candidate_could_plant(project, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "planted.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    script.chmod(0o755)
    repo = gitops.KernelRepo(project)
    with (project / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {script}\n\thooksPath = {tmp_path}\n[gc]\n\tauto = 1\n")
    (tmp_path / "pre-commit").write_text(f"#!/bin/sh\necho hook >> {marker}\n")
    (tmp_path / "pre-commit").chmod(0o755)
    (tmp_path / "post-commit").write_bytes((tmp_path / "pre-commit").read_bytes())
    repo.start_branch("hardened")
    (project / "kernel.py").write_text("v2\n")
    repo.commit_kernel("exp 1", "hardened")
    repo.uncommitted_tracked_files()
    repo.reset_hard(repo.head())
    assert not marker.exists()
    assert subprocess.run(["git", "status"], cwd=project, capture_output=True).returncode == 0
    assert marker.exists(), "the planted config is live for plain git: the test plants what it should"


def test_the_environment_of_git_has_no_secrets(project, monkeypatch, tmp_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("GITHUB_PAT", "ghp-secret")
    dump = tmp_path / "env"
    repo = gitops.KernelRepo(project)
    repo._overrides += ["-c", f"core.editor=env > {dump}"]     # any program git runs sees git's environment
    repo._git("var", "GIT_EDITOR")
    subprocess.run(["sh", "-c", repo._git("var", "GIT_EDITOR")], env=repo._env, check=True)
    assert "secret" not in dump.read_text()
