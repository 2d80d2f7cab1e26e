"""The package's structure, read from its source with ast: no module imports a top-level script, and no
two modules import each other round a loop (docs/architecture.md draws what may import what)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autokernel.starter_blocks import ENGINE_FILE, block_lines

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autokernel"
# The top-level files: the layout's front doors and the one file the agent edits. The package may import none.
TOP_LEVEL_SCRIPTS = {path.stem for path in ROOT.glob("*.py")}
LONGEST_FILE = 400                      # lines; bench.py, the judge, may be longer
# The CUDA GEMM starter holds three kernels in its one CUDA_SOURCE literal (Hopper's wgmma + TMA pipeline,
# mma.sync for other GPUs, IEEE float32 on the CUDA cores): a starter is one file, its source one string.
# The Triton GEMM starter likewise holds four kernels (pointer tiles, float32 by TMA with B K-major, B's
# transpose, the split-K sum) and the shape planning that picks among them, in the one file the agent edits.
# The GEMM engine is one block every GEMM starter carries whole (the persistent kernel, its split-K sum, its
# epilogues and the planning from the measured table): its source file is that block; in a starter it does
# not count against the starter's own length.
LONG_FILES_ALLOWED = {"bench.py", "kernels/cuda/matmul.py", "kernels/matmul.py", "kernels/_gemm_engine.py"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at module level or inside a function, except under `if TYPE_CHECKING:`."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """The absolute module names an import statement may load: `from a import b` names a.b and a."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = importer.split(".") if is_package else importer.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph(package: Path, root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (the implicit import of a parent package is not an edge)."""
    sources = {module_name(path, root): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in sources.items():
        edges = set()
        for node in imports_of(ast.parse(path.read_text(), filename=str(path))):
            for target in imported_names(node, name, path.name == "__init__.py"):
                if target in sources and target != name and not name.startswith(target + "."):
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def connect(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                lowlink[node] = min(lowlink[node], lowlink[target])
            elif target in on_stack:
                lowlink[node] = min(lowlink[node], index[target])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return cycles


def test_no_module_of_the_package_imports_a_top_level_script():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path, ROOT)
        for node in imports_of(ast.parse(path.read_text(), filename=str(path))):
            for target in imported_names(node, name, path.name == "__init__.py"):
                if target.split(".")[0] in TOP_LEVEL_SCRIPTS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert TOP_LEVEL_SCRIPTS >= {"bench", "reference", "extract", "orchestrate", "verify", "profile", "kernel"}
    assert offenders == []


def test_the_package_has_no_import_loop():
    graph = import_graph(PACKAGE, ROOT)
    assert len(graph) > 50 and "autokernel.loop" in graph["autokernel.session"]
    assert find_cycles(graph) == []


def test_the_cycle_check_finds_a_loop_through_a_function_level_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from pkg.c import thing\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nimport pkg.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (package / "e.py").write_text("from . import d\n")
    graph = import_graph(package, tmp_path)
    assert graph["pkg.e"] == {"pkg.d"} and graph["pkg.d"] == set()
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_script_check_sees_a_lazy_import_of_a_script(tmp_path):
    source = "def main():\n    import extract\n    from bench import main as judge\n"
    names = [target for node in imports_of(ast.parse(source)) for target in imported_names(node, "autokernel.x", False)]
    assert {"extract", "bench"} <= {name.split(".")[0] for name in names}


# Every folder of the project that holds Python: the package, the starters, the benchmarks, the tests.
PROJECT_FOLDERS = [".", "autokernel", "autokernel/agents", "autokernel/kernel_types", "kernels", "kernels/cuda",
                   "benchmarks", "benchmarks/notes", "benchmarks/problems", "models", "tests", "tests/agents",
                   "tests/attacks", "tests/judge_fixtures", "tests/kernel_types", "tests/kernels", "tests/kernels/cuda"]


@pytest.mark.parametrize("folder", PROJECT_FOLDERS)
def test_no_file_is_over_the_length_bar(folder):
    assert (ROOT / folder).is_dir(), f"{folder} is gone: update PROJECT_FOLDERS"
    too_long = {}
    for path in sorted((ROOT / folder).glob("*.py")):
        relative = str(path.relative_to(ROOT))
        text = path.read_text()
        # A starter's copy of the GEMM engine is the engine's own file's (tests/test_starter_blocks.py), held there.
        lines = len(text.splitlines()) - (block_lines(text) if relative != ENGINE_FILE else 0)
        if lines > LONGEST_FILE and relative not in LONG_FILES_ALLOWED:
            too_long[relative] = lines
    assert too_long == {}
