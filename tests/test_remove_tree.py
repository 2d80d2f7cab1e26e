"""What a candidate leaves in its folders is removed without following the links it planted
(autokernel/sandbox/child_env.py's remove_tree), and a passing candidate's cache folder is kept only while it holds
no more than compiler caches need (runner.run_bench)."""

import os
import subprocess
import sys
import shutil
import textwrap
from pathlib import Path

import pytest

from autokernel.judge import runner, source_check
from autokernel.sandbox import child_env

ROOT = Path(__file__).resolve().parents[1]

# As an ordinary user: root passes every permission check, so a candidate's read-only folder changes nothing for it.
PLANTED = textwrap.dedent("""
    import os, sys
    from autokernel.sandbox.child_env import remove_tree
    base = sys.argv[1]
    outside, tree = os.path.join(base, "outside"), os.path.join(base, "tree")
    os.makedirs(outside)
    secret = os.path.join(outside, "secret")
    open(secret, "w").write("keep me")
    os.chmod(secret, 0o600)
    locked = os.path.join(tree, "locked")
    os.makedirs(os.path.join(locked, "deeper"))
    os.symlink(secret, os.path.join(locked, "to_secret"))         # in a folder it made read-only below
    os.symlink(outside, os.path.join(locked, "to_outside"))
    open(os.path.join(locked, "deeper", "big"), "w").write("x" * 100)
    os.chmod(os.path.join(locked, "deeper"), 0)                     # unreadable
    os.chmod(locked, 0o500)
    os.symlink(outside, os.path.join(tree, "link_at_top"))
    print(remove_tree(tree), os.path.lexists(tree), oct(os.stat(secret).st_mode & 0o777), open(secret).read(),
          sorted(os.listdir(outside)))
""")


def _without_privileges() -> list[str]:
    """The command prefix that runs a process as an ordinary user would: root without its capabilities."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root, and no setpriv to give up root's capabilities with")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]


def test_remove_tree_removes_what_the_candidate_locked_and_follows_no_link(tmp_path):
    base = str(tmp_path)
    try:
        proc = subprocess.run([*_without_privileges(), sys.executable, "-c", PLANTED, base], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr
        # Gone, and the file a planted link named kept its mode (shutil.rmtree's onerror made it 0o700) and content.
        assert proc.stdout.split() == ["True", "False", "0o600", "keep", "me", "['secret']"]
    finally:
        child_env.remove_tree(os.path.join(base, "tree"))


def test_remove_tree_unlinks_a_link_in_the_folders_own_place(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "file").write_text("kept")
    (tmp_path / "folder").symlink_to(target)
    assert child_env.remove_tree(tmp_path / "folder")
    assert (target / "file").read_text() == "kept"
    assert child_env.remove_tree(tmp_path / "never-made")


def test_a_folder_of_many_files_or_a_large_one_has_outgrown_compiler_caches(tmp_path, monkeypatch):
    folder = tmp_path / "caches"
    (folder / "triton").mkdir(parents=True)
    (folder / "triton" / "kernel.cubin").write_bytes(b"x" * 1000)
    assert not child_env.outgrown(folder)
    with open(folder / "sparse", "wb") as sparse:      # counted at its length: no disk used, still not a cache
        sparse.truncate(child_env.CANDIDATE_CACHE_LIMIT_BYTES + 1)
    assert child_env.outgrown(folder)
    (folder / "sparse").unlink()
    monkeypatch.setattr(child_env, "CANDIDATE_CACHE_LIMIT_ENTRIES", 5)
    for index in range(6):
        (folder / f"f{index}").write_text("")
    assert child_env.outgrown(folder)


@pytest.mark.slow
def test_a_passing_candidate_that_leaves_a_2_gib_file_loses_its_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")     # it opens a file: the layer behind the check
    kernel = tmp_path / "kernel.py"
    kernel.write_text(textwrap.dedent("""
        import os
        with open(os.path.join(os.path.dirname(os.environ["TRITON_CACHE_DIR"]), "hoard"), "wb") as _hoard:
            _hoard.truncate(2 << 30)
    """) + (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text())
    folder = child_env.cache_folder_of(kernel)
    result = runner.run_bench(kernel, shapes=[], dtype="float16", timeout_s=300, seed=7, extra_args=["--quick"])
    assert result.correctness == "PASS", result.message
    assert not folder.exists()
    # An honest kernel's folder stays, for its next bench.
    honest = tmp_path / "honest.py"
    honest.write_text((ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text())
    assert runner.run_bench(honest, shapes=[], dtype="float16", timeout_s=300, seed=7,
                            extra_args=["--quick"]).correctness == "PASS"
    assert child_env.cache_folder_of(honest).is_dir()
