"""The installed tool, not the clone: build the wheel, install it into a fresh venv, and run `autokernel profile`
and a short `autokernel optimize` on CPU inside a new git repository outside the clone (pyproject.toml, setup.py,
autokernel/core/paths.py); and the declared dependencies are exactly what the code imports."""

from __future__ import annotations

import ast
import json
import re
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib

from tests.test_orchestrate import TINY_MODEL

PROJECT = Path(__file__).resolve().parents[1]
IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _source_copy(destination: Path) -> Path:
    """The clone's files as git knows them (tracked, and new ones not ignored): what a fresh checkout builds."""
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], PROJECT).stdout
    for name in filter(None, listed.split("\0")):
        source = PROJECT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            (destination / name).write_bytes(source.read_bytes())
    return destination


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    source = _source_copy(base / "source")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(source)]
    # With this environment's setuptools (offline); where it is too old to build wheels (before 70.1,
    # without the wheel package), in pip's isolated build environment, as `pip install .` would.
    offline = subprocess.run([*build, "--no-build-isolation", "--no-index"], cwd=base, capture_output=True, text=True,
                             timeout=600)
    if offline.returncode != 0:
        _run(build, base)
    (built,) = (base / "dist").glob("autokernel-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv that sees this interpreter's torch and triton, with the wheel installed and nothing else of ours."""
    folder = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], folder.parent)
    see_the_running_interpreters_packages(folder)
    # --ignore-installed: an autokernel the environment already sees (the clone's editable install,
    # or its egg-info on PYTHONPATH) must not count as this wheel being installed.
    _run([str(folder / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
          "-q", str(wheel)], folder.parent)
    return folder


def see_the_running_interpreters_packages(folder: Path) -> Path:
    """--system-site-packages gives a venv the base interpreter's packages; where the tests run in a venv themselves,
    torch is in that venv's site-packages instead, which the new venv would not see. A .pth file in the new venv's
    site-packages puts this interpreter's on its path too, after its own (their .pth files, such as the clone's
    editable install, are not run: only a site directory's are)."""
    own = _run([str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               folder).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    pth = Path(own) / "_running_interpreter.pth"
    pth.write_text("".join(f"{path}\n" for path in ours))
    return pth


def _user_env(venv: Path, home: Path) -> dict:
    kept = {name: os.environ[name] for name in ("LANG", "LC_ALL", "TMPDIR") if name in os.environ}
    return {**kept, **IDENTITY, "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home)}


def test_the_wheel_holds_the_package_alone_with_the_tool_files_inside_it(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"autokernel", "autokernel-0.1.0.dist-info"}, top_level
    for needed in ("autokernel/_layout/bench.py", "autokernel/_layout/program.md",
                   "autokernel/_layout/kernels/softmax.py", "autokernel/kernel_types/references.py",
                   "autokernel/profile/jobs.py"):
        assert needed in names


@pytest.mark.slow
def test_the_venv_sees_this_interpreters_torch_and_the_wheels_autokernel(venv, tmp_path):
    seen = _run([str(venv / "bin" / "python"), "-c", "import autokernel, torch, triton; print(torch.__file__); "
                 "print(autokernel.__file__)"], tmp_path, _user_env(venv, tmp_path)).stdout.split()
    import torch

    assert seen[0] == torch.__file__ and str(venv) in seen[1]


@pytest.mark.slow
def test_installed_profile_and_optimize_work_in_a_new_repository_outside_the_clone(venv, tmp_path):
    repo = tmp_path / "user_project"
    repo.mkdir()
    (repo / "model.py").write_text(TINY_MODEL)
    (repo / ".gitignore").write_text("workspace/\nresults.tsv\n__pycache__/\n")
    env = _user_env(venv, tmp_path)
    _run(["git", "init", "-q", "-b", "main"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-q", "-m", "my model"], repo, env)

    where = _run([str(venv / "bin" / "python"), "-c", "import autokernel, sys; print(autokernel.__file__)"],
                 repo, env).stdout
    assert str(venv) in where and str(PROJECT) not in where

    profiled = _run([str(venv / "bin" / "autokernel"), "profile", "model.py", "--warmup", "1", "--iters", "1"],
                    repo, env, timeout=300)
    plan = json.loads((repo / "workspace" / "optimization_plan.json").read_text())
    assert [entry["kernel_type"] for entry in plan["entries"]][:1] == ["softmax"], profiled.stdout

    optimized = _run([str(venv / "bin" / "autokernel"), "optimize", "model.py", "--agent", "builtin", "--top", "1",
                      "--budget", "2m", "--max-reverts", "1", "--tag", "installed"], repo, env, timeout=400)
    assert "1_softmax" in optimized.stdout, optimized.stdout
    branch_files = _run(["git", "ls-tree", "-r", "--name-only", "autokernel/installed"], repo, env).stdout.split()
    assert {"kernel.py", "optimized_kernels/1_softmax.py", "optimized_kernels/manifest.json"} <= set(branch_files)
    rows = (repo / "results.tsv").read_text().splitlines()
    assert len(rows) >= 2 and rows[0].startswith("experiment")
    assert _run(["git", "branch", "--show-current"], repo, env).stdout.strip() == "main"
    installed = Path(where.strip()).parent
    assert not any((installed.parent / name).exists() for name in ("workspace", "results.tsv", "kernel.py")), \
        "the run wrote beside the installed package"

    # Outside any repository the installed command refuses, and leaves nothing (no workspace/run.lock) behind.
    outside = tmp_path / "not_a_repository"
    outside.mkdir()
    (outside / "model.py").write_text(TINY_MODEL)
    refused = subprocess.run([str(venv / "bin" / "autokernel"), "optimize", "model.py", "--agent", "builtin"],
                             cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "is not inside a git repository" in refused.stderr, refused.stderr
    assert sorted(path.name for path in outside.iterdir()) == ["model.py"]


# Distribution name -> the module it installs, where the two differ.
MODULE_OF = {"gitpython": "git", "pyyaml": "yaml"}
# Declared without an import of ours: Triton's interpreter (the CPU path) needs numpy, and triton does not declare it.
NEEDED_BY_OTHERS = {"numpy"}
FRONT_DOORS = ("bench.py", "profile.py", "extract.py", "orchestrate.py", "verify.py", "reference.py")


def _third_party_imports() -> set[str]:
    """The top-level modules the package and the front doors import, beyond the standard library and our own."""
    files = [*sorted((PROJECT / "autokernel").rglob("*.py")), *(PROJECT / name for name in FRONT_DOORS)]
    found = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"autokernel", "__future__"}


def _modules(requirements: list[str]) -> set[str]:
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}
    return {MODULE_OF.get(name, name) for name in names}


def test_every_dependency_is_imported_and_every_import_is_declared():
    """The README's install (`pip install -e .`) must bring what the morning commands need (matplotlib for the
    report's progress.png), and nothing the code never imports (gitpython: the loop runs git itself, hardened)."""
    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    core = _modules(project["dependencies"])
    optional = set().union(*(_modules(extra) for extra in project["optional-dependencies"].values()))
    imported = _third_party_imports()
    assert "matplotlib" in core, "autokernel report draws progress.png with matplotlib: a core dependency"
    assert core - NEEDED_BY_OTHERS <= imported, f"declared but never imported: {sorted(core - NEEDED_BY_OTHERS - imported)}"
    assert imported <= core | optional, f"imported but not declared: {sorted(imported - core - optional)}"


def test_ci_runs_the_readmes_test_command_and_the_fast_tier_leaves_out_a_registered_marker():
    """.ci/run runs the Quick start's test command word for word (the whole suite, in parallel); the Development
    section's fast tier leaves out the `slow` marker that pyproject.toml registers (--strict-markers)."""
    readme = (PROJECT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    [test_command] = [line for line in quick_start.splitlines() if line.startswith("pip install") and "pytest" in line]
    ci_lines = [line.strip() for line in (PROJECT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines and "-n auto" in test_command
    development = readme.split("## Development", 1)[1]
    assert 'python -m pytest -q -n auto -m "not slow"' in development
    options = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in options["addopts"] and any(marker.startswith("slow:") for marker in options["markers"])
    # -n auto hands tests out by work stealing: xdist's default leaves a worker idle behind the last long cases.
    assert "--dist worksteal" in options["addopts"]


def test_the_wheel_lists_every_subpackage_of_the_package():
    """pyproject.toml names the packages the wheel carries: every folder of autokernel/ with an __init__.py (a layer
    left out installs a package that cannot import it)."""
    listed = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {".".join(path.parent.relative_to(PROJECT).parts) for path in (PROJECT / "autokernel").rglob("__init__.py")}
    assert sorted(listed) == sorted(found)


def test_the_torch_the_readme_installs_and_the_tests_run_on_is_in_the_declared_range():
    """pyproject.toml states the torch releases AutoKernel was tested with (Inductor's generated code, which the
    region starters are made from, changes between releases); the README's install and this interpreter's torch must
    be inside it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    project = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    [torch_requirement] = [r for r in project["dependencies"] if re.split(r"[<>=!~ ]", r, maxsplit=1)[0] == "torch"]
    supported = SpecifierSet(torch_requirement.removeprefix("torch"))
    assert any(spec.operator in ("<", "<=") for spec in supported), "an upper bound: the newest release tested"
    installed_by_readme = re.findall(r"torch==([\d.]+)", (PROJECT / "README.md").read_text())
    assert installed_by_readme and all(Version(version) in supported for version in installed_by_readme)
    import torch

    assert Version(torch.__version__.split("+")[0]) in supported


def test_the_quick_start_has_its_two_commands_and_points_a_cpu_machine_to_torchs_cpu_build():
    """Exactly two commands (install and run; install and test), each one line that works on a fresh machine with the
    package registries alone; PyPI's Linux torch carries CUDA's libraries (gigabytes), so the Quick start tells a
    machine without an NVIDIA GPU how to take the CPU build first (issue 38)."""
    quick_start = (PROJECT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in quick_start.split("```bash", 1)[1].split("```", 1)[0].splitlines()
                if line.strip() and not line.startswith("#")]
    assert len(commands) == 2 and all(line.startswith("pip install torch==") for line in commands)
    assert "autokernel optimize" in commands[0] and "pytest" in commands[1]
    prose = " ".join(quick_start.split("```")[2].split())
    assert "without an NVIDIA GPU" in prose and "--index-url https://download.pytorch.org/whl/cpu" in prose


def test_a_cuda_build_of_torch_without_a_gpu_is_pointed_to_the_cpu_build(monkeypatch):
    """A run on a machine without a GPU whose torch is a CUDA build (pip took PyPI's) says how to get the CPU build."""
    import torch

    from autokernel.search import session

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    note = session.cuda_build_note()
    assert "CUDA build" in note and "pip install torch==2.14.1 --index-url https://download.pytorch.org/whl/cpu" in note
    monkeypatch.setattr(torch.version, "cuda", None)
    assert session.cuda_build_note() is None, "the CPU build: nothing to say"
