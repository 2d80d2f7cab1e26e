"""Tests for autokernel/core/kernel_file.py: a kernel file becomes a module by its path, under the caller's name."""

import sys

import pytest

from autokernel.core.kernel_file import import_file
from autokernel.core.paths import starter_path


def test_a_file_is_imported_by_path_under_the_given_name_and_left_out_of_sys_modules(tmp_path):
    (tmp_path / "reference.py").write_text("KERNEL_TYPE = 'softmax'\nVALUE = 41 + 1\n")
    module = import_file(tmp_path / "reference.py", "candidate_under_test")
    assert (module.__name__, module.VALUE, module.KERNEL_TYPE) == ("candidate_under_test", 42, "softmax")
    assert "candidate_under_test" not in sys.modules
    assert sys.modules.get("reference") is not module       # no file shadows a module of the same name


def test_the_starters_import_and_a_broken_file_raises_its_own_error(tmp_path):
    assert import_file(starter_path("softmax"), "starter_softmax_under_test").KERNEL_TYPE == "softmax"
    (tmp_path / "broken.py").write_text("def kernel_fn(:\n")
    with pytest.raises(SyntaxError):
        import_file(tmp_path / "broken.py", "broken_under_test")
    with pytest.raises((ImportError, FileNotFoundError)):
        import_file(tmp_path / "missing.txt", "missing_under_test")
