"""The judge's own files: the judge that runs is the judge the run started with, whatever the sandbox mode.

The judge is the autokernel package (its process is `python -m autokernel.judge.bench`) and bench.py, the door
in the layout that runs it for a person. Where Landlock confines files, no
candidate can write them. Where it does not (AUTOKERNEL_SANDBOX_FS=0, or a kernel without Landlock),
a candidate can write wherever the user can: an outside review changed the installed judge that way,
for good, and later runs trusted it. Two checks close that, in every mode:
  - `Digest`: the loop reads the judge's files once (bench.py, reference.py, every file of the
    package, bytecode included) and keeps their bytes. After every bench (runner.run_bench) it
    compares them; a file changed, removed or added is restored and the bench is a CRASH.
  - `record_compiled` (the judge's process, first thing): from then on it compiles every
    module of the package from its source, never from a .pyc, and keeps the sha256 of the bytes it
    compiled; the judge puts them in its verdict (`JUDGE_SOURCES`), and run_bench checks each against
    the digest. So a judge file changed and put back during one bench is caught too: what was
    compiled is what was hashed.
What this does not cover, with the file rules off: torch, Triton and every other installed package,
which the candidate can change like any file of the user's (the session's warning says so).
Only the standard library is imported here: the judge's process imports this module before anything else.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path

PACKAGE = "autokernel"
PACKAGE_DIR = Path(__file__).resolve().parents[1]       # autokernel/, above judge/: every layer
JUDGE_SOURCES = "judge_sources"        # the verdict's key: {file: sha256 of the source the judge compiled}

_compiled: dict[str, str] = {}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------- the judge's side (autokernel/judge/bench.py)
class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module from the bytes of its source file, and notes their digest (no bytecode is read or written)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        data = self.get_data(path)
        _compiled[os.path.realpath(path)] = _sha(data)
        return compile(data, path, "exec", dont_inherit=True)


class _PackageFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _SourceOnlyLoader(spec.loader.name, spec.loader.path)
        elif spec is not None and spec.loader is not None and spec.origin not in (None, "namespace"):
            # A module of the package with no source to compile (a sourceless .pyc, a shared object: planted, for
            # instance in a folder linked into the package, which no digest reads). Recording it would not help: once
            # it runs in the judge it can rewrite the record. So it never runs.
            raise ImportError(f"the judge imports its own modules from source only, not {spec.origin}", name=fullname)
        return spec


def record_compiled() -> None:
    """From now on, compile the package's modules from source and keep their digests (idempotent)."""
    if any(isinstance(finder, _PackageFinder) for finder in sys.meta_path):
        return
    # The modules imported before this call (the package's __init__ and this file), read now: no
    # candidate runs yet when the judge starts.
    # The judge's entry module among them, run as __main__ (`python -m autokernel.judge.bench`, or bench.py's
    # runpy): it goes by its own name in its spec.
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        name = getattr(getattr(module, "__spec__", None), "name", None) or name
        if (name == PACKAGE or name.startswith(PACKAGE + ".")) and origin:
            _compiled[os.path.realpath(origin)] = _sha(Path(origin).read_bytes())
    sys.meta_path.insert(0, _PackageFinder())


def reports_its_sources(bench_script: Path) -> bool:
    """Whether a stand-in judge script records what it compiles (a test's need not; the package's judge does)."""
    try:
        return f"{record_compiled.__name__}()" in Path(bench_script).read_text()
    except OSError:
        return False


def compiled() -> dict[str, str]:
    """Each file of the package this process compiled (or found imported), by its real path: sha256 of its bytes."""
    return dict(_compiled)


# ---------------------------------------------------------------------- the loop's side (runner.run_bench)
def judge_files(bench_script: Path, package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """bench.py (the judge's door, or a test's stand-in), reference.py beside it, and every file of the package
    (sources and bytecode).

    Not a bytecode cache's other files: Python writes a .pyc as `<name>.pyc.<number>` first and renames it, so
    another process's import shows one for a moment, and nothing imports such a file."""
    files = [bench_script, bench_script.with_name("reference.py")]
    files += sorted(path for path in package_dir.rglob("*") if path.is_file() and not _being_written(path))
    return [path for path in files if path.is_file()]


def links_to_folders(package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Entries of the package that are links to folders (or to nothing): rglob lists them without looking inside,
    and a file inside one is a module of the package all the same (`judge/limits/` -> anywhere, a package that
    comes before limits.py). By the link's own path, never where it leads."""
    return sorted(os.path.join(os.path.realpath(path.parent), path.name) for path in package_dir.rglob("*")
                  if path.is_symlink() and not path.is_file())


def _being_written(path: Path) -> bool:
    return path.parent.name == "__pycache__" and not path.name.endswith(".pyc")


class Digest:
    """The judge's files as the run found them: their bytes, to compare and to put back."""

    def __init__(self, bench_script: Path, package_dir: Path = PACKAGE_DIR):
        self.bench_script, self.package_dir = bench_script, package_dir
        _remove_planted_bytecode(package_dir)
        self.kept = {os.path.realpath(path): path.read_bytes() for path in judge_files(bench_script, package_dir)}
        self.shas = {path: _sha(data) for path, data in self.kept.items()}
        self.links = set(links_to_folders(package_dir))

    def changed(self) -> list[str]:
        """The judge's files that differ from the digest now: changed, removed, or new.

        Bytecode that Python wrote (the loop's own later imports) is no change: a .pyc whose code is
        its source's, compiled here, is taken into the digest; any other .pyc is one that was planted."""
        now = {os.path.realpath(path) for path in judge_files(self.bench_script, self.package_dir)}
        differ = [path for path in now - set(self.kept)]
        differ += [path for path in links_to_folders(self.package_dir) if path not in self.links]
        differ += [path for path, data in self.kept.items() if path not in now or _read(path) != data]
        honest = [path for path in differ if path in now and _is_compiled_from_its_source(path)]
        for path in honest:
            self.kept[path] = Path(path).read_bytes()
            self.shas[path] = _sha(self.kept[path])
        return sorted(set(differ) - set(honest))

    def restore(self, paths: list[str]) -> None:
        """Put each file back as the digest has it (a new one is removed)."""
        for path in paths:
            if path in self.kept:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_bytes(self.kept[path])
            else:
                Path(path).unlink(missing_ok=True)

    def unknown_sources(self, reported: dict) -> list[str]:
        """The files a judge's verdict says it compiled whose bytes are not the digest's."""
        if not isinstance(reported, dict):
            return ["(no list of the judge's sources)"]
        return sorted(str(path) for path, sha in reported.items() if self.shas.get(path) != sha)


def _is_compiled_from_its_source(path: str) -> bool:
    """Whether a .pyc holds exactly the code Python compiles from its source file as it is now.

    The code objects are compared (bytecode, constants, names, line table; nested functions too), not marshal's
    bytes: those depend on the process that wrote them (which strings it had interned, reference counts), so
    another process's honest import (another loop, a test worker) writes other bytes for the same code."""
    import importlib.util
    import io
    import marshal

    if not path.endswith(".pyc"):
        return False
    try:
        source = importlib.util.source_from_cache(path)
        data = Path(path).read_bytes()
        stat = os.stat(source)
        header = importlib._bootstrap_external._code_to_timestamp_pyc(   # noqa: SLF001 (the header Python writes)
            compile(b"", source, "exec"), stat.st_mtime, stat.st_size)[:16]
        code = compile(Path(source).read_bytes(), source, "exec", dont_inherit=True)
        if data[:16] != header:
            return False
        stream = io.BytesIO(data[16:])
        written = marshal.load(stream)
    except (OSError, ValueError, SyntaxError, AttributeError, EOFError, TypeError):
        return False
    return _same_code(written, code) and stream.tell() == len(data) - 16       # nothing after the code either


# What code equality (code.__eq__) leaves out and still decides what runs. It compares instructions with their
# specializations undone and skips their inline caches, so a .pyc may hold COMPARE_OP_INT_JUMP with a mask of its
# choosing (`if a < b` that never jumps) or LOAD_GLOBAL_MODULE with an index to another global, and still equal its
# source's code (tests/test_judge_files.py plants one). The raw instructions, caches included, must be the
# compiler's; so must the variable kinds (cell, free) and the stack size, which equality does not look at either.
_RAW_FIELDS = ("co_varnames", "co_cellvars", "co_freevars", "co_nlocals", "co_stacksize", "co_qualname")


def _same_code(written, code) -> bool:
    import types

    if written != code or getattr(written, "_co_code_adaptive", written.co_code) != \
            getattr(code, "_co_code_adaptive", code.co_code):
        return False
    if any(getattr(written, name, None) != getattr(code, name, None) for name in _RAW_FIELDS):
        return False
    return all(_same_code(a, b) for a, b in zip(written.co_consts, code.co_consts)
               if isinstance(a, types.CodeType) or isinstance(b, types.CodeType))


def _remove_planted_bytecode(package_dir: Path) -> None:
    """Before the digest is taken: remove this interpreter's bytecode of the package that is not what its source
    compiles to. The judge's first imports (the package's __init__s, this module and the entry module itself, run
    by `python -m`) still load their .pyc, and a
    digest that took a planted one as the judge's (left by an earlier run with the file rules off, killed before
    its check, or by anything else that wrote there) would protect it. Python writes honest bytecode again on the
    next import."""
    tag = f".{sys.implementation.cache_tag}."
    for path in package_dir.rglob("*.pyc"):
        if tag in path.name and path.is_file() and not _is_compiled_from_its_source(str(path)):
            try:
                path.unlink()
            except OSError:       # not ours to remove (a read-only install): the judge's own check names it then
                pass


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


_digests: dict[str, Digest] = {}


def digest_of(bench_script: Path) -> Digest:
    """This process's digest of the judge at bench_script, taken the first time it is asked for (the run's start)."""
    key = os.path.realpath(bench_script)
    if key not in _digests:
        _digests[key] = Digest(Path(key))
    return _digests[key]
