"""The package's structure, read from its source with ast: every module sits in a layer, no layer imports one above
it, no module imports a top-level script, and no two modules import each other round a loop (docs/architecture.md,
"The house", draws what may import what)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from autokernel.core.starter_blocks import ENGINE_FILE, block_lines
from autokernel.kernel_types import TYPES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autokernel"
# The top-level files: the layout's front doors and the one file the agent edits. The package may import none.
TOP_LEVEL_SCRIPTS = {path.stem for path in ROOT.glob("*.py")}
LONGEST_FILE = 400                      # lines
# The layers, bottom up: one subpackage each. A module imports its own layer and the layers below it, never one
# above; the few modules at the package's top level (the doors) may import any layer, and none imports them.
LAYERS = ["core", "sandbox", "kernel_types", "judge", "routing", "profile", "agents", "fleet", "search", "verify",
          "reports"]
# The doors: the package's top level holds nothing else.
TOP_LEVEL_MODULES = {"autokernel", "autokernel.api", "autokernel.cli", "autokernel.score"}
MOST_TOP_LEVEL_MODULES = 15
DEEPEST_LAYER_CHAIN = 9                 # layers, the top level counted as one
# The CUDA GEMM starter holds three kernels in its one CUDA_SOURCE literal (Hopper's wgmma + TMA pipeline,
# mma.sync for other GPUs, IEEE float32 on the CUDA cores): a starter is one file, its source one string.
# The Triton GEMM starter likewise holds four kernels (pointer tiles, float32 by TMA with B K-major, B's
# transpose, the split-K sum) and the shape planning that picks among them, in the one file the agent edits.
# The GEMM engine is one block every GEMM starter carries whole (the persistent kernel, its split-K sum, its
# epilogues and the planning from the measured table): its source file is that block; in a starter it does
# not count against the starter's own length.
# The attention starter holds the one-pass flash kernel (pointer and TMA loads) and, for head dims above 256, the
# two kernels that keep the scores in memory, in the one file the agent edits.
LONG_FILES_ALLOWED = {"kernels/cuda/matmul.py", "kernels/matmul.py", "kernels/_gemm_engine.py",
                      "kernels/flash_attention.py"}


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
    assert len(graph) > 50 and "autokernel.search.loop" in graph["autokernel.search.session"]
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


def layer_of(module: str, layers: list[str]) -> int:
    """The module's place in the order: its layer's index, or len(layers) for a module at the package's top level."""
    parts = module.split(".")
    return layers.index(parts[1]) if len(parts) > 1 and parts[1] in layers else len(layers)


def upward_imports(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Each import of a module from a layer above the importer's (the top level counted above every layer)."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if layer_of(target, layers) > layer_of(module, layers))


def layer_depth(graph: dict[str, set[str]], layers: list[str]) -> int:
    """The longest chain of layers importing one another (a layer on its own is 1; the top level counts as one)."""
    below = {index: set() for index in range(len(layers) + 1)}
    for module, targets in graph.items():
        below[layer_of(module, layers)] |= {layer_of(target, layers) for target in targets} - {layer_of(module, layers)}
    depth: dict[int, int] = {}
    for index in sorted(below):          # no upward import: every layer a layer imports comes before it
        depth[index] = 1 + max((depth[lower] for lower in below[index]), default=0)
    return max(depth.values())


def test_every_module_sits_in_a_layer_but_the_doors_at_the_top_level():
    graph = import_graph(PACKAGE, ROOT)
    top_level = {module for module in graph if layer_of(module, LAYERS) == len(LAYERS)}
    assert top_level == TOP_LEVEL_MODULES and len(top_level) <= MOST_TOP_LEVEL_MODULES
    assert sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py")) == sorted(LAYERS)


def test_no_layer_imports_a_layer_above_it():
    graph = import_graph(PACKAGE, ROOT)
    assert "autokernel.kernel_types.base" in graph["autokernel.judge.correctness"]
    assert upward_imports(graph, LAYERS) == []
    assert layer_depth(graph, LAYERS) <= DEEPEST_LAYER_CHAIN


def test_the_layer_check_finds_an_upward_import_in_a_function_and_measures_the_depth(tmp_path):
    package = tmp_path / "pkg"
    for layer in ("low", "mid", "high"):
        (package / layer).mkdir(parents=True)
        (package / layer / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "door.py").write_text("from pkg.high import h\n")
    (package / "low" / "l.py").write_text("def later():\n    from pkg.mid import m\n")
    (package / "mid" / "m.py").write_text("from pkg.low import l\n")
    (package / "high" / "h.py").write_text("from pkg.mid import m\nimport pkg.door\n")
    graph = import_graph(package, tmp_path)
    assert upward_imports(graph, ["low", "mid", "high"]) == ["pkg.high.h -> pkg.door", "pkg.low.l -> pkg.mid",
                                                           "pkg.low.l -> pkg.mid.m"]
    (package / "low" / "l.py").write_text("")
    (package / "high" / "h.py").write_text("from pkg.mid import m\n")
    graph = import_graph(package, tmp_path)
    assert upward_imports(graph, ["low", "mid", "high"]) == [] and layer_depth(graph, ["low", "mid", "high"]) == 4


def _table(header: str, document: str = "architecture.md") -> list[list[str]]:
    """The rows of the table under this header line in docs/<document>, as lists of cells."""
    lines = (ROOT / "docs" / document).read_text().splitlines()
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("| "):
            return rows
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def _named(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_documented_layers_are_the_folders_in_order_and_import_what_they_say():
    imports = {layer: set() for layer in LAYERS}
    for module, targets in import_graph(PACKAGE, ROOT).items():
        for target in targets:
            own, other = layer_of(module, LAYERS), layer_of(target, LAYERS)
            if own < len(LAYERS) and other != own:
                imports[LAYERS[own]].add(LAYERS[other])
    rows = _table("| layer | rooms | imports |")
    assert [row[0] for row in rows] == [f"`{layer}/`" for layer in LAYERS]
    for layer, row in zip(LAYERS, rows):
        assert [name.rstrip("/") for name in _named(row[2])] == [lower for lower in LAYERS if lower in imports[layer]]


def test_the_documented_modules_are_the_packages_each_named_once():
    covered = []
    for name in (name for row in _table("| module | job |", "modules.md") for name in _named(row[0])):
        if name == "kernel_types/<type>.py":
            covered += [PACKAGE / "kernel_types" / f"{kernel_type}.py" for kernel_type in TYPES]
        elif name.endswith("/"):
            covered += [path for path in (PACKAGE / name).rglob("*.py") if path.name != "__init__.py"]
        else:
            covered.append(PACKAGE / name)
    assert len(covered) == len(set(covered))
    assert sorted(covered) == sorted(path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")


def test_the_script_check_sees_a_lazy_import_of_a_script(tmp_path):
    source = "def main():\n    import extract\n    from bench import main as judge\n"
    names = [target for node in imports_of(ast.parse(source)) for target in imported_names(node, "autokernel.x", False)]
    assert {"extract", "bench"} <= {name.split(".")[0] for name in names}


# Every folder of the project that holds Python: the package, the starters, the benchmarks, the tests.
PROJECT_FOLDERS = [".", "autokernel", *(f"autokernel/{layer}" for layer in LAYERS), "autokernel/judge/candidate",
                   "autokernel/kernel_types/regions", "autokernel/profile/regions", "autokernel/routing/regions",
                   "kernels", "kernels/cuda", "benchmarks", "benchmarks/suites", "benchmarks/problems", "benchmarks/zoo",
                   "models",
                   "tests", "tests/agents", "tests/attacks", "tests/judge_fixtures", "tests/kernel_types",
                   "tests/kernels", "tests/kernels/cuda", "tests/regions"]


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


def test_every_folder_that_holds_python_is_held_to_the_length_bar():
    # Hidden folders, build/ and a wheel's _layout/ are not the project's sources.
    def skipped(part: str) -> bool:
        return part.startswith(".") or part in ("build", "_layout", "__pycache__")

    found = [path for path in ROOT.rglob("*.py") if not any(skipped(part) for part in path.relative_to(ROOT).parts)]
    ignored = ignored_by_git(found)
    folders = {str(path.parent.relative_to(ROOT)) for path in found if path not in ignored}
    assert folders == set(PROJECT_FOLDERS)


def test_what_gpu_runs_wrote_is_kept_as_data_not_as_python():
    # benchmarks/results/ holds records of GPU runs, the kernels they judged among them: stored as .py.txt, so that no
    # importer, test collector or code scan takes a record for the project's code.
    kernels = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "benchmarks" / "results").rglob("*.py"))
    assert kernels == [], f"rename these to .py.txt: {kernels}"


def ignored_by_git(paths: list[Path]) -> set[Path]:
    """The paths git ignores: a run's outputs (workspace/, which the Quick start leaves in the clone), not sources.
    Outside a git checkout (an unpacked sdist) nothing is ignored."""
    listed = "\n".join(str(path.relative_to(ROOT)) for path in paths)
    done = subprocess.run(["git", "check-ignore", "--stdin"], cwd=ROOT, input=listed, capture_output=True, text=True)
    return {ROOT / line for line in done.stdout.splitlines()} if done.returncode in (0, 1) else set()


def test_the_run_outputs_a_quick_start_leaves_in_the_clone_are_no_sources():
    workspace_was_there = (ROOT / "workspace").exists()
    run_output = ROOT / "workspace" / "test_architecture_probe" / "kernel_1_softmax.py"
    run_output.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_output.write_text("KERNEL_TYPE = 'softmax'\n")
        assert ignored_by_git([run_output, ROOT / "bench.py"]) == {run_output}
        test_every_folder_that_holds_python_is_held_to_the_length_bar()
    finally:
        run_output.unlink()
        run_output.parent.rmdir()
        if not workspace_was_there:
            (ROOT / "workspace").rmdir()
