"""Reads a kernel file's TUNABLES and TUNABLE_CHOICES literals and rewrites TUNABLES in place.

The rewrite replaces only source spans inside the TUNABLES dict literal, so every other byte of the
file (comments, formatting, the kernels themselves) stays identical and the git diff of an
experiment shows just the values that changed.
"""

from __future__ import annotations

import ast
import json

TUNABLES = "TUNABLES"
TUNABLE_CHOICES = "TUNABLE_CHOICES"


def read_tunables(source: str) -> tuple[dict, dict[str, list]]:
    """The (TUNABLES, TUNABLE_CHOICES) dicts a kernel file declares; ValueError if they are missing or bad."""
    tree = _parse(source)
    tunables = _literal_dict(_assigned_value(tree, TUNABLES), TUNABLES)
    choices = _literal_dict(_assigned_value(tree, TUNABLE_CHOICES), TUNABLE_CHOICES)
    for name, values in choices.items():
        if name not in tunables:
            raise ValueError(f"{TUNABLE_CHOICES} names {name!r}, which {TUNABLES} does not have "
                             f"(TUNABLES has: {', '.join(map(str, tunables)) or 'nothing'})")
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"{TUNABLE_CHOICES}[{name!r}] must be a non-empty list of values, got {values!r}")
    return tunables, {name: list(values) for name, values in choices.items()}


def rewrite_tunables(source: str, values: dict) -> str:
    """The same source with TUNABLES set to `values`; nothing outside the TUNABLES literal changes.

    When the keys stay the same, only the changed values are replaced, so the layout and comments
    inside the literal survive too; otherwise the whole literal is rewritten on one line.
    """
    node = _assigned_value(_parse(source), TUNABLES)
    current = _literal_dict(node, TUNABLES)
    keys = [None if key is None else ast.literal_eval(key) for key in node.keys] if isinstance(node, ast.Dict) else []
    if keys == list(values):
        edits = [(value_node, format_literal(values[key])) for key, value_node in zip(keys, node.values)
                 if format_literal(current[key]) != format_literal(values[key])]
    else:
        edits = [(node, format_literal(values))]
    encoded = source.encode("utf-8")
    # ast column offsets count UTF-8 bytes, so the splice works on bytes, not characters.
    line_starts = [0]
    for line in encoded.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    for edited, text in sorted(edits, key=lambda edit: (edit[0].lineno, edit[0].col_offset), reverse=True):
        start = line_starts[edited.lineno - 1] + edited.col_offset
        end = line_starts[edited.end_lineno - 1] + edited.end_col_offset
        encoded = encoded[:start] + text.encode("utf-8") + encoded[end:]
    return encoded.decode("utf-8")


def format_literal(value) -> str:
    """Python source for a literal of dicts, lists, tuples, strings, numbers, booleans and None."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{format_literal(k)}: {format_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(format_literal, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(format_literal, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, str):
        # Double quotes match the starters' style; JSON string escapes are valid Python.
        return json.dumps(value)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) as a literal in {TUNABLES}")


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as err:
        raise ValueError(f"kernel source does not parse: {err}") from None


def _assigned_value(tree: ast.Module, name: str) -> ast.expr:
    values = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            values.append(statement.value)
    if not values:
        raise ValueError(f"kernel source has no top-level `{name} = {{...}}` assignment")
    if len(values) > 1:
        raise ValueError(f"kernel source assigns {name} {len(values)} times at top level; expected once")
    return values[0]


def _literal_dict(node: ast.expr, name: str) -> dict:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError):
        raise ValueError(f"{name} must be a plain dict literal (constants only), "
                         f"got `{ast.unparse(node)}`") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict literal, got {type(value).__name__}")
    return value
