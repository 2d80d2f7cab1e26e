"""The loop's git operations: a branch per run, a commit per experiment, a hard reset for every revert.

Only kernel.py and optimized_kernels/ are ever staged, so the loop cannot commit anything else a
user had lying around, and it refuses to start while tracked files have uncommitted changes (a
`git reset --hard` would destroy them). GitPython is imported on first use: the GPU box that only
runs bench.py does not have it.
"""

from __future__ import annotations

from pathlib import Path

BRANCH_PREFIX = "autokernel/"
KERNEL_FILE_NAME = "kernel.py"
OPTIMIZED_DIR_NAME = "optimized_kernels"
# Used only when git has no identity configured, so an unattended run on a fresh box can commit.
FALLBACK_IDENTITY = {"GIT_AUTHOR_NAME": "AutoKernel", "GIT_AUTHOR_EMAIL": "autokernel@localhost",
                     "GIT_COMMITTER_NAME": "AutoKernel", "GIT_COMMITTER_EMAIL": "autokernel@localhost"}


class GitOpsError(Exception):
    """A git precondition the loop needs does not hold; the message says what to do."""


def branch_name(tag: str) -> str:
    return BRANCH_PREFIX + tag


class KernelRepo:
    """The project repository as the loop uses it."""

    def __init__(self, root: str | Path):
        try:
            import git
        except ImportError as exc:
            raise GitOpsError("the optimization loop needs GitPython: pip install gitpython") from exc
        self.root = Path(root)
        try:
            self._repo = git.Repo(self.root)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise GitOpsError(f"{self.root} is not a git repository; the loop keeps its history in git "
                              f"(run `git init && git add -A && git commit -m init` there first)") from exc
        self._git_error = git.GitCommandError
        if not self._has_identity():
            self._repo.git.update_environment(**FALLBACK_IDENTITY)

    def _has_identity(self) -> bool:
        reader = self._repo.config_reader()
        return reader.has_option("user", "name") and reader.has_option("user", "email")

    def _git(self, *args: str) -> str:
        try:
            return self._repo.git.execute(["git", *args])
        except self._git_error as exc:
            raise GitOpsError(f"git {' '.join(args)} failed: {exc.stderr.strip() or exc}") from exc

    def uncommitted_tracked_files(self) -> list[str]:
        status = self._git("status", "--porcelain", "--untracked-files=no")
        return [line[3:] for line in status.splitlines() if line.strip()]

    def ensure_clean(self) -> None:
        """Refuse to go on while tracked files have changes a `git reset --hard` would throw away."""
        changed = self.uncommitted_tracked_files()
        if changed:
            listing = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
            raise GitOpsError(f"tracked files have uncommitted changes ({listing}); commit or stash them first: "
                              f"the loop resets the tree after every rejected experiment")

    def has_branch(self, tag: str) -> bool:
        return branch_name(tag) in [head.name for head in self._repo.heads]

    def current_branch(self) -> str | None:
        return None if self._repo.head.is_detached else self._repo.active_branch.name

    def ensure_new_branch(self, tag: str) -> None:
        """Refuse a tag whose branch exists (a name clash) or a repository with nothing to branch from."""
        if not self._repo.head.is_valid():
            raise GitOpsError(f"{self.root} has no commits yet; commit the project first")
        if self.has_branch(tag):
            raise GitOpsError(f"branch {branch_name(tag)} already exists: pass --resume to continue that run "
                              f"or --tag with a new name")

    def start_branch(self, tag: str) -> None:
        """Create autokernel/<tag> at HEAD and check it out."""
        self.ensure_new_branch(tag)
        self._git("checkout", "-b", branch_name(tag))

    def checkout_branch(self, tag: str) -> None:
        if not self.has_branch(tag):
            raise GitOpsError(f"branch {branch_name(tag)} does not exist, so there is no run {tag!r} to resume")
        if self.current_branch() != branch_name(tag):
            self._git("checkout", branch_name(tag))

    def head(self) -> str:
        return self._repo.head.commit.hexsha

    def _commit(self, paths: list[str], message: str) -> str:
        self._git("add", "--", *paths)
        # --allow-empty: a candidate identical to the kept kernel is still experiment N with its own commit.
        # --no-verify and --no-gpg-sign: a user's hooks or signing prompt must not stall an unattended run.
        self._git("commit", "--allow-empty", "--no-verify", "--no-gpg-sign", "-m", message, "--", *paths)
        return self.head()

    def commit_kernel(self, message: str) -> str:
        """Commit kernel.py alone; returns the new commit's hash."""
        return self._commit([KERNEL_FILE_NAME], message)

    def commit_optimized(self, message: str) -> str:
        """Commit everything under optimized_kernels/ (the saved kernels and their manifest)."""
        return self._commit([OPTIMIZED_DIR_NAME], message)

    def reset_hard(self, commit: str) -> None:
        self._git("reset", "--hard", commit)

    def file_at(self, commit: str, path: str) -> str:
        """The text of path as committed in commit (read from git's objects, byte for byte)."""
        return (self._repo.commit(commit).tree / path).data_stream.read().decode("utf-8")
