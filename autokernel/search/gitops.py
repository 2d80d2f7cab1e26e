"""The loop's git operations: a branch per run, a commit per experiment, a hard reset for every revert.

Only kernel.py and optimized_kernels/ are ever staged, so the loop cannot commit anything else a
user had lying around, and it refuses to start while tracked files have uncommitted changes (a
`git reset --hard` would destroy them).

Every git command runs hardened against a repository a candidate may have tampered with:
  - with the allow-listed environment of a bench child (no API key reaches git or its helpers);
  - with no system or global config (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=/dev/null): the
    identity and safe.directory entries the user had are read once, when the repository is opened;
  - with `-c` overrides for every repository setting that runs a program: fsmonitor, hooks, pager,
    editor, ssh, credential helpers, automatic gc and maintenance, signing. Filters and textconv
    drivers come from .git/config, which autokernel/search/integrity.py checks (and restores) after every
    bench, before any git command runs.
Every commit carries a trailer naming the run (AUTOKERNEL_TRAILER), so resume tells the loop's
commits from a user's.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from autokernel.core.paths import OPTIMIZED_DIR_NAME
from autokernel.sandbox.child_env import child_environment

BRANCH_PREFIX = "autokernel/"
KERNEL_FILE_NAME = "kernel.py"
AUTOKERNEL_TRAILER = "AutoKernel-Run"
# Used only when git has no identity configured, so an unattended run on a fresh box can commit.
FALLBACK_IDENTITY = {"name": "AutoKernel", "email": "autokernel@localhost"}
HARDENED_CONFIG = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "core.pager=cat", "core.editor=true",
                   "core.askPass=", "core.sshCommand=false", "core.attributesFile=/dev/null",
                   "core.untrackedCache=false", "gc.auto=0", "maintenance.auto=false", "commit.gpgSign=false",
                   "tag.gpgSign=false", "credential.helper=", "protocol.allow=never", "submodule.recurse=false",
                   "advice.detachedHead=false", "status.showUntrackedFiles=normal")


class GitOpsError(Exception):
    """A git precondition the loop needs does not hold; the message says what to do."""


def branch_name(tag: str) -> str:
    return BRANCH_PREFIX + tag


@dataclass
class Commit:
    sha: str
    subject: str
    run_tag: str | None       # the AutoKernel-Run trailer; None on a commit the loop did not make


def _user_settings(root: Path) -> tuple[dict[str, str], list[str]]:
    """The user's identity and safe.directory entries, read once with their full configuration."""
    def read(*args: str) -> list[str]:
        completed = subprocess.run(["git", "-c", "core.fsmonitor=false", "config", *args], cwd=root,
                                   env=child_environment(), capture_output=True, text=True)
        return completed.stdout.splitlines() if completed.returncode == 0 else []

    identity = {}
    for key, fallback in FALLBACK_IDENTITY.items():
        identity[key] = (os.environ.get(f"GIT_AUTHOR_{key.upper()}") or next(iter(read("--get", f"user.{key}")), "")
                         or fallback)
    committer = {key: os.environ.get(f"GIT_COMMITTER_{key.upper()}") or value for key, value in identity.items()}
    env = {"GIT_AUTHOR_NAME": identity["name"], "GIT_AUTHOR_EMAIL": identity["email"],
           "GIT_COMMITTER_NAME": committer["name"], "GIT_COMMITTER_EMAIL": committer["email"]}
    return env, read("--get-all", "safe.directory")


class KernelRepo:
    """The project repository as the loop uses it."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        probe = subprocess.run(["git", "-c", "core.fsmonitor=false", "rev-parse", "--show-toplevel"], cwd=self.root,
                               env=child_environment(), capture_output=True, text=True)
        if probe.returncode != 0 or Path(probe.stdout.strip()).resolve() != self.root.resolve():
            raise GitOpsError(f"{self.root} is not a git repository; the loop keeps its history in git "
                              f"(run `git init && git add -A && git commit -m init` there first)")
        identity_env, safe_directories = _user_settings(self.root)
        self._env = {**child_environment(), **identity_env, "GIT_CONFIG_NOSYSTEM": "1",
                     "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
        self._overrides = [arg for setting in (*HARDENED_CONFIG, *(f"safe.directory={d}" for d in safe_directories))
                           for arg in ("-c", setting)]
        # A worktree keeps HEAD in its own git dir, and config, hooks and refs in the common one.
        self.git_dir = Path(self._git("rev-parse", "--path-format=absolute", "--git-dir"))
        self.common_dir = Path(self._git("rev-parse", "--path-format=absolute", "--git-common-dir"))

    def _git(self, *args: str, check: bool = True) -> str:
        completed = subprocess.run(["git", *self._overrides, *args], cwd=self.root, env=self._env,
                                   capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if check and completed.returncode != 0:
            raise GitOpsError(f"git {' '.join(args)} failed: {completed.stderr.strip() or completed.stdout.strip()}")
        return completed.stdout.strip()

    # ------------------------------------------------------------------ the state of the tree
    def uncommitted_tracked_files(self) -> list[str]:
        status = self._git_bytes("status", "--porcelain", "-z", "--untracked-files=no").decode(errors="replace")
        entries = iter(status.split("\0"))
        changed = []
        for entry in entries:
            if entry:
                changed.append(entry[3:])
                if entry[0] in "RC":
                    next(entries, None)       # a rename's source path follows it
        return changed

    def ensure_clean(self) -> None:
        """Refuse to go on while tracked files have changes a `git reset --hard` would throw away."""
        changed = self.uncommitted_tracked_files()
        if changed:
            listing = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
            raise GitOpsError(f"tracked files have uncommitted changes ({listing}); commit or stash them first: "
                              f"the loop resets the tree after every rejected experiment")

    def untracked_files(self, under: str | None = None, *, ignored: bool = False) -> list[str]:
        """Untracked files (and, with ignored=True, untracked folders wholly ignored) relative to the root."""
        args = ["ls-files", "-z", "--others", "--directory" if ignored else "--exclude-standard"]
        listing = self._git(*args, *(["--", under] if under else []))
        return sorted(name for name in listing.split("\0") if name)

    def tracked_files(self) -> list[str]:
        return [name for name in self._git_bytes("ls-files", "-z").decode(errors="replace").split("\0") if name]

    def has_commits(self) -> bool:
        return bool(self._git("rev-parse", "--verify", "--quiet", "HEAD", check=False))

    # ------------------------------------------------------------------ branches
    def has_branch(self, tag: str) -> bool:
        return bool(self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch_name(tag)}", check=False))

    def current_branch(self) -> str | None:
        name = self._git("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return name or None

    def current_position(self) -> str:
        """The branch checked out, or the commit of a detached HEAD: where to return the user at the end."""
        return self.current_branch() or self.head()

    def ensure_new_branch(self, tag: str) -> None:
        """Refuse a tag whose branch exists (a name clash) or a repository with nothing to branch from."""
        if not self.has_commits():
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

    def checkout(self, position: str) -> None:
        """Check out a branch by name or a commit (detached), as current_position() gave it."""
        if self._git("rev-parse", "--verify", "--quiet", f"refs/heads/{position}", check=False):
            self._git("checkout", position)
        else:
            self._git("checkout", "--detach", position)

    # ------------------------------------------------------------------ commits
    def head(self) -> str:
        return self._git("rev-parse", "HEAD")

    def _commit(self, paths: list[str], message: str, tag: str) -> str:
        self._git("add", "--", *paths)
        # --allow-empty: a candidate identical to the kept kernel is still experiment N with its own commit.
        # --no-verify and --no-gpg-sign: a user's hooks or signing prompt must not stall an unattended run.
        self._git("commit", "--allow-empty", "--no-verify", "--no-gpg-sign", "-m", message,
                  "-m", f"{AUTOKERNEL_TRAILER}: {tag}", "--", *paths)
        return self.head()

    def commit_kernel(self, message: str, tag: str) -> str:
        """Commit kernel.py alone; returns the new commit's hash."""
        return self._commit([KERNEL_FILE_NAME], message, tag)

    def commit_optimized(self, message: str, tag: str) -> str:
        """Commit everything under optimized_kernels/ (the saved kernels and their manifest)."""
        return self._commit([OPTIMIZED_DIR_NAME], message, tag)

    def reset_hard(self, commit: str) -> None:
        self._git("reset", "--quiet", "--hard", commit)

    def file_at(self, commit: str, path: str) -> str:
        """The text of path as committed in commit (read from git's objects, byte for byte)."""
        return self._git_bytes("cat-file", "blob", f"{commit}:{path}").decode("utf-8")

    def _git_bytes(self, *args: str) -> bytes:
        completed = subprocess.run(["git", *self._overrides, *args], cwd=self.root, env=self._env,
                                   capture_output=True, stdin=subprocess.DEVNULL)
        if completed.returncode != 0:
            raise GitOpsError(f"git {' '.join(args)} failed: {completed.stderr.decode(errors='replace').strip()}")
        return completed.stdout

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return subprocess.run(["git", *self._overrides, "merge-base", "--is-ancestor", ancestor, descendant],
                              cwd=self.root, env=self._env, capture_output=True).returncode == 0

    def commits_after(self, base: str, tip: str = "HEAD") -> list[Commit]:
        """The commits in base..tip, newest first, with the run each says it belongs to."""
        log = self._git("log", "--format=%H%x1f%s%x1f%(trailers:key=" + AUTOKERNEL_TRAILER + ",valueonly)%x1e",
                        f"{base}..{tip}")
        commits = []
        for record in filter(None, (entry.strip() for entry in log.split("\x1e"))):
            sha, subject, trailer = (record.split("\x1f") + ["", ""])[:3]
            commits.append(Commit(sha, subject, trailer.strip() or None))
        return commits

    def changed_files(self, base: str, tip: str = "HEAD") -> list[str]:
        return sorted(filter(None, self._git("diff", "--no-ext-diff", "--no-textconv", "--name-only", base, tip)
                             .splitlines()))

    def refs(self) -> dict[str, str]:
        """Every ref and the object it points to."""
        listing = self._git("for-each-ref", "--format=%(refname) %(objectname)")
        return dict(line.split(" ", 1) for line in listing.splitlines() if line)

    def set_ref(self, name: str, target: str | None) -> None:
        if target is None:
            self._git("update-ref", "-d", name)
        else:
            self._git("update-ref", name, target)
