"""Tests for autokernel/judge/judge_files.py: the judge that runs is the judge the run started with, in every sandbox
mode.

The end-to-end tests judge a kernel with the file rules off (AUTOKERNEL_SANDBOX_FS=0), in a copy of the
project, so a candidate really can write the judge's files there: once it changes them for good, once it
changes one and puts it back before the bench ends.
"""

import json
import os
import py_compile
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autokernel.judge import judge_files

PROJECT = Path(__file__).resolve().parents[1]


def _package(tmp_path: Path) -> tuple[Path, Path]:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "correctness.py").write_text("TOLERANCE = 1e-2\n")
    (package / "timing.py").write_text("def clock():\n    return 0\n")
    bench = tmp_path / "bench.py"
    bench.write_text("print('judge')\n")
    return bench, package


def test_a_changed_removed_or_planted_judge_file_is_named_and_put_back(tmp_path):
    bench, package = _package(tmp_path)
    digest = judge_files.Digest(bench, package)
    assert digest.changed() == []
    (package / "correctness.py").write_text("TOLERANCE = 1e9\n")
    (package / "timing.py").unlink()
    (package / "planted.py").write_text("import os\n")
    changed = digest.changed()
    assert changed == sorted(os.path.realpath(package / name) for name in ("correctness.py", "planted.py", "timing.py"))
    digest.restore(changed)
    assert (package / "correctness.py").read_text() == "TOLERANCE = 1e-2\n" and (package / "timing.py").exists()
    assert not (package / "planted.py").exists() and digest.changed() == []


def test_bytecode_python_wrote_is_no_change_and_planted_bytecode_is(tmp_path):
    bench, package = _package(tmp_path)
    digest = judge_files.Digest(bench, package)
    honest = Path(py_compile.compile(str(package / "timing.py"), doraise=True))
    assert digest.changed() == [], "a .pyc compiled from its own source is what the loop's imports write"
    planted = Path(py_compile.compile(str(package / "correctness.py"), doraise=True))
    other = compile("TOLERANCE = 1e9\n", str(package / "correctness.py"), "exec")
    planted.write_bytes(planted.read_bytes()[:16] + __import__("marshal").dumps(other))   # the right header, other code
    assert digest.changed() == [os.path.realpath(planted)]
    honest.write_bytes(honest.read_bytes() + b"\0")
    assert os.path.realpath(honest) in digest.changed()


def test_bytecode_planted_before_the_run_is_removed_when_the_digest_is_taken(tmp_path):
    """bench.py's first imports still load their .pyc: one planted before the run (an earlier run killed before its
    check, with the file rules off) must not become the judge the digest protects."""
    bench, package = _package(tmp_path)
    honest = Path(py_compile.compile(str(package / "timing.py"), doraise=True))
    planted = Path(py_compile.compile(str(package / "correctness.py"), doraise=True))
    other = compile("TOLERANCE = 1e9\n", str(package / "correctness.py"), "exec")
    planted.write_bytes(planted.read_bytes()[:16] + __import__("marshal").dumps(other))
    digest = judge_files.Digest(bench, package)
    assert not planted.exists() and honest.exists()
    assert os.path.realpath(honest) in digest.kept and os.path.realpath(planted) not in digest.kept
    assert digest.changed() == []


def test_bytecode_another_process_wrote_by_importing_is_no_change(tmp_path):
    # marshal writes a string as interned where it is: a one-character string is one object in a process, interned
    # once anything interns it. So another process's honest import (a test worker, a second loop) may write other
    # bytes than this process would for the same code.
    (tmp_path / "home.py").write_text('HOME = "~"\n')
    digest = judge_files.Digest(tmp_path / "bench.py", tmp_path)
    sys.intern("~")
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import home"], cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)},
                   check=True)
    assert list(tmp_path.rglob("home*.pyc")) and digest.changed() == []
    # Python writes `<name>.pyc.<number>` first and renames it: seen mid-write, it is no change either.
    (tmp_path / "__pycache__" / "home.cpython-311.pyc.140213").write_bytes(b"\xa7\r\r\n")
    assert digest.changed() == []



def _specialized(pyc: Path) -> None:
    """Rewrite pyc so every COMPARE_OP is COMPARE_OP_INT_JUMP with a mask that never jumps: an `if a > b:` whose body
    always runs. The code still equals its source's by code.__eq__ (it undoes specializations, skips inline caches)."""
    import dis
    import marshal
    import types

    data = pyc.read_bytes()
    code = marshal.loads(data[16:])
    body = data[16:]

    def swap(co):
        nonlocal body
        raw = bytearray(co.co_code)
        for i in range(0, len(raw), 2):
            if raw[i] == dis.opmap["COMPARE_OP"]:
                raw[i], raw[i + 4], raw[i + 5] = dis._all_opmap["COMPARE_OP_INT_JUMP"], 0, 0   # cache 2: the mask
        if bytes(raw) != co.co_code:
            assert body.count(co.co_code) == 1
            body = body.replace(co.co_code, bytes(raw))
        for const in co.co_consts:
            if isinstance(const, types.CodeType):
                swap(const)
    swap(code)
    pyc.write_bytes(data[:16] + body)
    assert marshal.loads(body) == code, "the planted code must still equal its source's by code.__eq__"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="COMPARE_OP_INT_JUMP keeps its mask in a cache in 3.11")
def test_bytecode_equal_to_its_source_but_for_its_inline_caches_is_planted(tmp_path):
    # An outside review's question: can a .pyc pass as Python's own and still do something else? In 3.11 it could:
    # code.__eq__ compares instructions with specializations undone and skips inline caches, so a planted .pyc
    # whose comparison never jumps was taken into the digest as honest bytecode, and every later import ran it.
    bench, package = _package(tmp_path)
    (package / "keep.py").write_text("def keep(speedup, best):\n    if speedup > best:\n        return 'keep'\n"
                                     "    return 'revert'\n")
    digest = judge_files.Digest(bench, package)
    planted = Path(py_compile.compile(str(package / "keep.py"), doraise=True))
    _specialized(planted)
    runs = subprocess.run([sys.executable, "-c", "import keep; print(keep.keep(1, 5))"], cwd=package,
                          env={**os.environ, "PYTHONPATH": str(package)}, capture_output=True, text=True, check=True)
    assert runs.stdout.strip() == "keep", "the planted bytecode does change what runs"
    assert digest.changed() == [os.path.realpath(planted)]


def test_a_folder_linked_into_the_package_is_planted(tmp_path):
    # Path.rglob lists a link to a folder without looking inside, and it is no file: the digest did not see it. Yet
    # a folder named like a module comes before the module (judge/limits/ before judge/limits.py), and its
    # __init__.pyc, with no source, ran in every later judge (a kernel returning zeros was then a PASS).
    bench, package = _package(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.pyc").write_bytes(b"planted")
    digest = judge_files.Digest(bench, package)
    (package / "timing").symlink_to(elsewhere, target_is_directory=True)
    changed = digest.changed()
    assert changed == [os.path.join(os.path.realpath(package), "timing")]
    digest.restore(changed)
    assert not (package / "timing").exists() and elsewhere.is_dir() and digest.changed() == []


def test_the_judge_never_runs_a_module_of_its_package_that_has_no_source(tmp_path):
    # A link made before the run's start is in its digest: what keeps a sourceless module of the package out of the
    # judge then is its finder, which refuses it (recorded, it could erase its own record once running).
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "source.py").write_text("RAN = True\n")
    py_compile.compile(str(tmp_path / "planted" / "source.py"), cfile=str(tmp_path / "planted" / "__init__.pyc"),
                       doraise=True)
    (tmp_path / "planted" / "source.py").unlink()
    probe = textwrap.dedent(f"""
        from autokernel.judge import judge_files
        judge_files.record_compiled()
        import autokernel.judge
        autokernel.judge.__path__.insert(0, {str(tmp_path)!r})
        try:
            import autokernel.judge.planted
            print("ran")
        except ImportError as exc:
            print("refused:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PROJECT)}).stdout
    assert out.startswith("refused: the judge imports its own modules from source only"), out


def test_what_the_judge_compiled_is_checked_against_the_digest(tmp_path):
    bench, package = _package(tmp_path)
    digest = judge_files.Digest(bench, package)
    source = os.path.realpath(package / "correctness.py")
    assert digest.unknown_sources({source: digest.shas[source]}) == []
    assert digest.unknown_sources({source: "0" * 64}) == [source]
    assert digest.unknown_sources({str(tmp_path / "elsewhere.py"): "0" * 64}) == [str(tmp_path / "elsewhere.py")]
    assert digest.unknown_sources(None) == ["(no list of the judge's sources)"]


# ---------------------------------------------------------------------- through the runner, file rules off
ATTACK = '''
import os
{body}
from tests.judge_fixtures import row_softmax as _honest
KERNEL_TYPE = "softmax"


def kernel_fn(x):
    return _honest.kernel_fn(x)
'''

RUN = '''
import json, sys
from pathlib import Path
from autokernel.core import paths
from autokernel.judge import judge_files, runner
assert runner.__file__.startswith(str(Path.cwd())), "the copy's package runs the loop"
judge_files.digest_of(paths.BENCH_SCRIPT)       # the run's start, as run_bench takes it
for path, text in json.loads(sys.argv[2]).items():
    Path(path).write_text(text)                  # what happened between the start and this bench
print(json.dumps(runner.run_bench(sys.argv[1], shapes=[], dtype="float16", timeout_s=300, seed=3,
                                  extra_args=["--quick"]).to_json()))
'''


def _copy_project(destination: Path) -> Path:
    for name in ("bench.py", "reference.py"):
        shutil.copy(PROJECT / name, destination / name)
    for folder in ("autokernel", "tests/judge_fixtures"):
        shutil.copytree(PROJECT / folder, destination / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def _judge_unconfined(project: Path, kernel_body: str, before: dict[str, str]) -> dict:
    kernel = project / "attack.py"
    kernel.write_text(ATTACK.format(body=textwrap.dedent(kernel_body)))
    # The source check off too (autokernel/judge/source_check.py refuses os and open): the layers behind it are tested.
    env = {**os.environ, "PYTHONPATH": str(project), "AUTOKERNEL_SANDBOX_FS": "0", "AUTOKERNEL_SOURCE_CHECK": "0",
           "XDG_CACHE_HOME": str(project / "cache")}
    proc = subprocess.run([sys.executable, "-c", RUN, str(kernel), json.dumps(before)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_candidate_that_changes_the_judge_for_good_is_void_and_the_judge_restored(tmp_path):
    project = _copy_project(tmp_path)
    original = (project / "autokernel" / "judge" / "correctness.py").read_text()
    result = _judge_unconfined(project, '''
        with open(os.path.join(os.getcwd(), "autokernel", "judge", "correctness.py"), "a") as handle:
            handle.write("\\nALWAYS_PASS = True\\n")
    ''', before={})
    assert result["correctness"] == "CRASH", result["message"]
    assert "judge's own files changed" in result["message"] and "correctness.py" in result["message"]
    assert (project / "autokernel" / "judge" / "correctness.py").read_text() == original


@pytest.mark.slow
def test_a_judge_changed_and_put_back_within_one_bench_is_caught_by_what_it_compiled(tmp_path):
    project = _copy_project(tmp_path)
    target = project / "autokernel" / "judge" / "correctness.py"
    original = target.read_text()
    (tmp_path / "original.txt").write_text(original)
    # The judge's file is changed after the run's start; the candidate puts it back as soon as it runs, so
    # the files are the digest's again when the bench ends: only what the judge compiled can tell.
    result = _judge_unconfined(project, f'''
        open({str(target)!r}, "w").write(open({str(tmp_path / "original.txt")!r}).read())
    ''', before={str(target): original + "\nCHANGED_BEFORE_THE_BENCH = True\n"})
    assert result["correctness"] == "CRASH", result["message"]
    assert "the judge that ran is not the run's" in result["message"] and "correctness.py" in result["message"]
    assert target.read_text() == original
