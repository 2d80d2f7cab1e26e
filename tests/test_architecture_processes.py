"""The package's processes, read from its source with ast, held to the rules its imports are held to
(tests/test_architecture.py): every process the package starts is `python -m autokernel.<module>` (or inline code,
`python -c`), never a file of the layout by its path, and a module that starts another counts as importing it, so no
layer starts a module of a layer above it.

A start is read where a command is built: a call of paths.module_command (its first argument names the module), or
a list whose first element is sys.executable ("-m" and the module after it; "-c"; else a path). A module name must be
one the source spells: a string, a module-level constant or dict of strings, or `module.__name__` of an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import (LAYERS, PACKAGE, ROOT, import_graph, imported_names, imports_of, module_name,
                                     upward_imports)

# The one command built from a path the caller names: runner.bench_command's stand-in for the judge, a test's script
# (runner.STAND_IN_JUDGE); the package's own judge is a module.
PATH_LAUNCHES_ALLOWED = {("autokernel.judge.runner", "str(bench_script)")}
# Where the commands are built: its own list holds the module as a parameter, checked at each call instead.
COMMAND_BUILDER = ("autokernel.core.paths", "module_command")


class Starts:
    """What one module's source starts: the modules (by name), the paths, and the starts it spells no module for."""

    def __init__(self, name: str, tree: ast.Module, is_package: bool):
        self.name, self.modules, self.paths, self.unnamed = name, set(), [], []
        self.constants = _module_constants(tree)
        self.aliases = _imported_modules(tree, name, is_package)
        for node in _outside_the_builder(tree, name):
            if isinstance(node, ast.Call) and _called_name(node.func) == COMMAND_BUILDER[1] and node.args:
                self._add(node.args[0], node.lineno)
            elif isinstance(node, (ast.List, ast.Tuple)) and node.elts and _is_sys_executable(node.elts[0]):
                self._command(node)

    def _command(self, node: ast.List | ast.Tuple) -> None:
        flags = [element for element in node.elts[1:] if isinstance(element, ast.Constant)]
        if flags and flags[0].value == "-c":
            return
        if flags and flags[0].value == "-m":
            position = node.elts.index(flags[0])
            self._add(node.elts[position + 1] if position + 1 < len(node.elts) else None, node.lineno)
            return
        self.paths.append((node.lineno, ast.unparse(node.elts[1]) if len(node.elts) > 1 else ""))

    def _add(self, expression: ast.expr | None, line: int) -> None:
        named = _module_names(expression, self.constants, self.aliases) if expression is not None else None
        if named is None:
            self.unnamed.append(f"{self.name}:{line} starts {ast.unparse(expression) if expression else '?'}")
        else:
            self.modules |= named


def _outside_the_builder(tree: ast.Module, name: str):
    skip = set()
    if name == COMMAND_BUILDER[0]:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == COMMAND_BUILDER[1]:
                skip = {id(child) for child in ast.walk(node)}
    return (node for node in ast.walk(tree) if id(node) not in skip)


def _called_name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _is_sys_executable(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "executable" and \
        isinstance(node.value, ast.Name) and node.value.id == "sys"


def _module_constants(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level NAME = "a.b" (one string) or NAME = {"k": "a.b", ...} (each value a string)."""
    found = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        value = getattr(node, "value", None)
        strings = [value] if isinstance(value, ast.Constant) else value.values if isinstance(value, ast.Dict) else []
        if strings and all(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in strings):
            for target in (t for t in targets if isinstance(t, ast.Name)):
                found[target.id] = {s.value for s in strings}
    return found


def _imported_modules(tree: ast.Module, importer: str, is_package: bool) -> dict[str, str]:
    """Local name -> the module it is bound to, for `import a.b as c` and `from a import b` (b possibly a module)."""
    aliases = {}
    for node in imports_of(tree):
        if isinstance(node, ast.Import):
            aliases.update({alias.asname or alias.name: alias.name for alias in node.names})
        else:
            base = imported_names(node, importer, is_package)[0]
            aliases.update({alias.asname or alias.name: f"{base}.{alias.name}" for alias in node.names})
    return aliases


def _module_names(node: ast.expr, constants: dict[str, set[str]], aliases: dict[str, str]) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in constants:
        return constants[node.value.id]
    if isinstance(node, ast.Attribute) and node.attr == "__name__" and isinstance(node.value, ast.Name) \
            and node.value.id in aliases:
        return {aliases[node.value.id]}
    return None


def starts_of(package: Path, root: Path) -> dict[str, Starts]:
    return {module_name(path, root): Starts(module_name(path, root), ast.parse(path.read_text(), filename=str(path)),
                                            path.name == "__init__.py")
            for path in package.rglob("*.py")}


def with_starts(graph: dict[str, set[str]], starts: dict[str, Starts]) -> dict[str, set[str]]:
    """The import graph with each started module as one more import of the module that starts it."""
    return {name: edges | (starts[name].modules - {name}) for name, edges in graph.items()}


# ---------------------------------------------------------------------- the package
def test_every_process_the_package_starts_is_one_of_its_modules_never_a_layout_file():
    starts = starts_of(PACKAGE, ROOT)
    modules = set(import_graph(PACKAGE, ROOT))
    started = {target for found in starts.values() for target in found.modules}
    assert {"autokernel.judge.bench", "autokernel.sandbox.launcher", "autokernel.verify.verify_command",
            "autokernel.cli", "autokernel.fleet.judge_worker"} <= started
    assert sorted(started - modules) == [], "a start names no module of the package"
    assert [line for found in starts.values() for line in found.unnamed] == []
    paths = {(name, path) for name, found in starts.items() for _, path in found.paths}
    assert paths == PATH_LAUNCHES_ALLOWED, "a process started by a file's path"


def test_no_layer_starts_a_module_of_a_layer_above_it():
    graph = with_starts(import_graph(PACKAGE, ROOT), starts_of(PACKAGE, ROOT))
    # score starts `autokernel optimize`: the top level, as score is.
    assert "autokernel.cli" in graph["autokernel.score"] and "autokernel.judge.bench" in graph["autokernel.judge.runner"]
    assert upward_imports(graph, LAYERS) == []


def test_the_layout_files_are_doors_of_the_package():
    # Each runs a module of the package and holds no logic of its own: a few lines past its docstring.
    for door in ("bench", "verify", "profile", "extract", "orchestrate", "reference"):
        tree = ast.parse((ROOT / f"{door}.py").read_text())
        code = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        assert sum(len(ast.unparse(node).splitlines()) for node in code) <= 20, door
        assert any(name.startswith("autokernel.") for node in imports_of(tree) for name in
                   imported_names(node, door, False)) or "autokernel." in ast.unparse(tree), door


# ---------------------------------------------------------------------- the checks themselves
def test_the_checks_find_a_layout_file_an_unnamed_module_and_an_upward_start(tmp_path):
    package = tmp_path / "pkg"
    for layer in ("low", "high"):
        (package / layer).mkdir(parents=True)
        (package / layer / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "h.py").write_text("")
    (package / "low" / "up.py").write_text(
        "import subprocess, sys\nMODULE = 'pkg.high.h'\ndef go():\n    subprocess.run([sys.executable, '-m', MODULE])\n")
    (package / "low" / "door.py").write_text(
        "import sys\nfrom pkg.low import paths\ndef go(name):\n    return [sys.executable, str(paths.script('bench.py'))], "
        "paths.module_command(name), [sys.executable, '-c', 'pass']\n")
    (package / "low" / "paths.py").write_text("")
    starts = starts_of(package, tmp_path)
    assert starts["pkg.low.up"].modules == {"pkg.high.h"}
    assert starts["pkg.low.door"].paths == [(4, "str(paths.script('bench.py'))")]
    assert starts["pkg.low.door"].unnamed == ["pkg.low.door:4 starts name"]
    graph = with_starts(import_graph(package, tmp_path), starts)
    assert upward_imports(graph, ["low", "high"]) == ["pkg.low.up -> pkg.high.h"]
    assert upward_imports(import_graph(package, tmp_path), ["low", "high"]) == []


def test_the_start_check_reads_module_name_and_a_table_of_modules(tmp_path):
    source = ("import sys\nfrom pkg.low import launcher\nTABLE = {'a': 'pkg.low.a', 'b': 'pkg.low.b'}\n"
              "def go(which):\n    module_command(TABLE[which])\n    return [sys.executable, '-m', launcher.__name__]\n")
    found = Starts("pkg.low.x", ast.parse(source), False)
    assert found.modules == {"pkg.low.a", "pkg.low.b", "pkg.low.launcher"} and not found.unnamed and not found.paths
