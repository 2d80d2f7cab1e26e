"""What the loop checks around each bench run: the candidate kept to its one file, its type and its signature.

Before a bench, `check_contract` reads the committed kernel.py (without running it): KERNEL_TYPE
must be the job's, as a string literal, and kernel_fn a top-level def with the reference's
parameters. A candidate that fails is not benched at all.

Around a bench, `Snapshot.take` records what a candidate must not change, and `Snapshot.restore`
puts back anything it did and says what: the repository's git configuration, hooks, attributes
and refs (HEAD must still be the experiment's commit), the loop's own files (results.tsv, the
workspace), and the working tree (no tracked file changed, no new file left). Under Landlock
(autokernel/sandbox/launcher.py) none of this is writable by the candidate; these checks are what still
holds on a kernel without it. The config files are compared and restored in Python before any git
command runs, so a planted fsmonitor, filter or hook never executes.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from autokernel.core.contracts import FAIL, BenchResult
from autokernel.judge.runner import synthesized_result
from autokernel.kernel_types import registry
from autokernel.search import gitops

# The loop's own files (relative to the repository root) a candidate must leave alone.
LOOP_FILES = ("results.tsv",)
LOOP_FOLDERS = ("workspace",)
# Written by the loop itself while a bench runs (budget.ClockKeeper, every two seconds): no candidate's doing.
WRITTEN_DURING_A_BENCH = ("clock.json", "clock.json.tmp")
LARGEST_SNAPSHOT_FILE = 8 * 2**20
# Bytecode caches are ignored by git but imported by the judge and the loop: a planted .pyc is code.
BYTECODE_DIR = "__pycache__"


class ContractError(Exception):
    """The kernel file breaks the job's contract (type, signature); the message says how."""


def check_contract(source: str, kernel_type: str) -> None:
    """KERNEL_TYPE is the job's and kernel_fn takes the reference's parameters, read from the source."""
    try:
        _check_contract(source, kernel_type)
    except (RecursionError, MemoryError, UnicodeError, ValueError) as exc:
        # The agent wrote the source: nesting too deep for the parser (or ast.unparse, literal_eval), a lone
        # surrogate. Any of these raised out of the loop and ended the run; now the candidate fails.
        raise ContractError(f"the source cannot be read as Python ({type(exc).__name__}: {str(exc)[:200]})") from None


def _check_contract(source: str, kernel_type: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return                      # bench.py reports a file that does not parse, with its line
    declared = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "KERNEL_TYPE" for t in node.targets)]
    if len(declared) != 1 or not isinstance(declared[0], ast.Constant) or declared[0].value != kernel_type:
        found = ast.unparse(declared[0]) if len(declared) == 1 else f"{len(declared)} assignments"
        raise ContractError(f"KERNEL_TYPE must be assigned once, as the literal {kernel_type!r} (this job's type); "
                            f"found {found}")
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "kernel_fn"]
    rebound = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "kernel_fn"
               and isinstance(node.ctx, ast.Store)]
    if len(defs) != 1 or rebound:
        raise ContractError("kernel_fn must be one top-level `def kernel_fn(...)`, never reassigned")
    expected = _reference_parameters(kernel_type)
    actual = _parameters(defs[0].args)
    if actual != expected:
        raise ContractError(f"kernel_fn must take the reference's parameters {_describe(expected)}; "
                            f"it takes {_describe(actual)}")
    _check_backend(tree)


def _assigned(tree: ast.Module, name: str) -> list[ast.expr]:
    return [node.value for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]


def _literal(tree: ast.Module, name: str, kind: type, what: str):
    """The one literal assigned to `name`, of type `kind`; ContractError otherwise."""
    values = _assigned(tree, name)
    try:
        value = ast.literal_eval(values[0]) if len(values) == 1 else None
    except ValueError:
        value = None
    if not isinstance(value, kind):
        raise ContractError(f"a CUDA kernel file assigns {name} once, as {what}")
    return value


def _check_backend(tree: ast.Module) -> None:
    """BACKEND, where given, is "triton" or "cuda"; a CUDA file's CUDA_SOURCE and tunables are literals
    the judge can read without running the file (autokernel/judge/cuda_launches.py, cuda_build.py)."""
    from autokernel.judge import cuda_build, cuda_launches

    if not _assigned(tree, "BACKEND"):
        return
    backends = [getattr(v, "value", None) for v in _assigned(tree, "BACKEND")]
    if backends not in (["triton"], ["cuda"]):
        raise ContractError('BACKEND must be assigned once, as the literal "triton" or "cuda"')
    if backends != ["cuda"]:
        return
    cuda_source = _literal(tree, "CUDA_SOURCE", str, "a string literal (the CUDA C++ source)")
    problem = cuda_launches.cuda_source_problem(cuda_source)
    if problem:
        raise ContractError(problem)
    tunables = _literal(tree, "TUNABLES", dict, "a dict literal (each tunable becomes a #define)")
    _literal(tree, "TUNABLE_CHOICES", dict, "a dict literal (the values the search may try)")
    try:
        cuda_build.defines(tunables)
    except ValueError as exc:
        raise ContractError(str(exc)) from None


def _reference_parameters(kernel_type: str) -> list[tuple[str, bool]]:
    signature = inspect.signature(registry.get(kernel_type).reference)
    return [(p.name, p.default is not inspect.Parameter.empty) for p in signature.parameters.values()]


def _parameters(args: ast.arguments) -> list[tuple[str, bool]]:
    if args.vararg or args.kwarg or args.kwonlyargs:
        return [("*", False)]
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    return [(arg.arg, index >= first_default) for index, arg in enumerate(positional)]


def _describe(parameters: list[tuple[str, bool]]) -> str:
    return "(" + ", ".join(name + ("=..." if default else "") for name, default in parameters) + ")"


@dataclass
class Snapshot:
    """What a bench run must leave exactly as it found it."""
    files: dict[Path, bytes | None] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    untracked: set[str] = field(default_factory=set)
    head: str = ""
    source_folders: list[Path] = field(default_factory=list)   # where the repository's Python sources are

    @classmethod
    def take(cls, repo: gitops.KernelRepo) -> Snapshot:
        folders = sorted({repo.root / Path(name).parent for name in repo.tracked_files() if name.endswith(".py")})
        snapshot = cls(refs=repo.refs(), untracked=set(repo.untracked_files(ignored=True)), head=repo.head(),
                       source_folders=folders)
        for path in _protected_files(repo, folders):
            snapshot.files[path] = path.read_bytes() if path.is_file() else None
        return snapshot

    def restore(self, repo: gitops.KernelRepo) -> list[str]:
        """Put back whatever the bench changed; returns what it found changed ([] when nothing)."""
        changes = self._restore_files(repo)     # first, and without git: the config may hold a planted command
        current = repo.refs()
        for name in sorted(set(current) | set(self.refs)):
            if current.get(name) != self.refs.get(name):
                changes.append(f"moved the ref {name}" if name in self.refs else f"created the ref {name}")
                repo.set_ref(name, self.refs.get(name))
        if repo.head() != self.head:
            changes.append("moved HEAD off the experiment's commit")
        changed = repo.uncommitted_tracked_files()
        if changed:
            changes.append(f"changed tracked files ({', '.join(changed[:5])})")
            repo.reset_hard(self.head)
        new = sorted(set(repo.untracked_files(ignored=True)) - self.untracked)
        for name in sorted(new):
            _remove(repo.root / name)
        if new:
            changes.append(f"left new files in the repository ({', '.join(sorted(new)[:5])})")
        return changes

    def _restore_files(self, repo: gitops.KernelRepo) -> list[str]:
        changes = []
        for path in sorted(set(self.files) | set(_protected_files(repo, self.source_folders))):
            before = self.files.get(path)
            now = path.read_bytes() if path.is_file() else None
            if now == before or (before is None and path.stat().st_size > LARGEST_SNAPSHOT_FILE):
                continue
            changes.append(f"{'created' if before is None else 'changed'} {_shown(repo, path)}")
            if before is None:
                _remove(path)
            else:
                path.write_bytes(before)
        return changes


def _protected_files(repo: gitops.KernelRepo, source_folders: list[Path]) -> list[Path]:
    """The files to compare, found without running git (the config may not be trusted yet)."""
    paths = [repo.common_dir / "config", repo.git_dir / "config.worktree", repo.git_dir / "HEAD",
             repo.common_dir / "packed-refs", repo.common_dir / "info" / "attributes",
             repo.common_dir / "info" / "exclude"]
    paths += [p for p in (repo.common_dir / "hooks").glob("*") if p.is_file()]
    paths += [repo.root / name for name in LOOP_FILES]
    # Children run with PYTHONDONTWRITEBYTECODE, so any .pyc beside the repository's own sources is planted.
    for folder in source_folders:
        paths += [p for p in (folder / BYTECODE_DIR).glob("*") if p.is_file()]
    for folder in LOOP_FOLDERS:
        paths += [p for p in (repo.root / folder).glob("*") if p.is_file()
                  and p.stat().st_size <= LARGEST_SNAPSHOT_FILE and p.name not in WRITTEN_DURING_A_BENCH]
    return paths


def _shown(repo: gitops.KernelRepo, path: Path) -> str:
    for base, label in ((repo.root, ""), (repo.common_dir, ".git/"), (repo.git_dir, ".git/")):
        if base in path.parents:
            return label + str(path.relative_to(base))
    return str(path)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def checked_bench(repo: gitops.KernelRepo, kept_commit: str, kernel_type: str,
                  bench: Callable[[], BenchResult]) -> BenchResult:
    """bench() (bench.py's result on the committed candidate) between a snapshot and its restore: a FAIL instead
    when the candidate changed anything but kernel.py (all undone), or bench.py judged another kernel type."""
    snapshot = Snapshot.take(repo)
    result = bench()
    changes = snapshot.restore(repo)
    changes += [f"changed {name} in the experiment's commit" for name in repo.changed_files(kept_commit)
                if name != gitops.KERNEL_FILE_NAME]
    if changes:
        return synthesized_result(FAIL, "sandbox: the candidate " + "; ".join(changes) + " (all undone)",
                                  kernel_type=kernel_type)
    return of_the_jobs_type(result, kernel_type)


def of_the_jobs_type(result: BenchResult, kernel_type: str) -> BenchResult:
    """The result, or a FAIL when bench.py judged the file as another kernel type than the job's."""
    if result.kernel_type not in (None, kernel_type):
        return synthesized_result(FAIL, f"contract: bench.py judged it as {result.kernel_type!r}, not this job's "
                                        f"{kernel_type!r}", kernel_type=kernel_type)
    return result
