"""The GEMM engine block the GEMM starters carry, kept in step with its source, and the measured table put in it.

Each starter is one file the agent edits and the loop copies whole (docs/modules.md), so the
GEMM engine is not imported by the starters: kernels/_gemm_engine.py holds it between two marker
lines, and every starter that uses it holds a verbatim copy between the same markers. This module
copies the block into the starters, tells which copies differ (tests/test_starter_blocks.py fails
on any), and writes a measured plan table (the GPU sweep's gemm_table.json, also kept as
kernels/gemm_table.json) into the block's GEMM_TABLE literal.

    python -m autokernel.core.starter_blocks                 # copy the engine block into every starter
    python -m autokernel.core.starter_blocks --check         # exit 1 naming the starters whose copy differs
    python -m autokernel.core.starter_blocks --table FILE    # install FILE's plans as GEMM_TABLE, then copy
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

from autokernel.core.paths import TOOL_DIR

BEGIN = "# ==== GEMM ENGINE: begin"
END = "# ==== GEMM ENGINE: end ===="
ENGINE_FILE = "kernels/_gemm_engine.py"
TABLE_FILE = "kernels/gemm_table.json"


class BlockError(Exception):
    """A file's engine markers are missing, repeated or out of order."""


def block_span(text: str, where: str = "") -> tuple[int, int] | None:
    """(start, end) character offsets of the block, its marker lines included; None when a file has none."""
    begins, ends = text.count(BEGIN), text.count(END)
    if begins == ends == 0:
        return None
    if begins != 1 or ends != 1:
        raise BlockError(f"{where}: expected one '{BEGIN}' line and one '{END}' line, found {begins} and {ends}")
    start = text.index(BEGIN)
    end = text.index("\n", text.index(END)) + 1
    if end <= start:
        raise BlockError(f"{where}: the engine's end marker comes before its begin marker")
    return start, end


def block_of(text: str, where: str = "") -> str:
    span = block_span(text, where)
    if span is None:
        raise BlockError(f"{where}: no engine block")
    return text[span[0]:span[1]]


def block_lines(text: str) -> int:
    """Lines of a file inside its engine block (0 without one): the architecture test's length bar skips them."""
    span = block_span(text)
    return 0 if span is None else text[span[0]:span[1]].count("\n")


def starters_with_block(root: Path = TOOL_DIR) -> list[Path]:
    """Every starter (kernels/*.py but the engine's own file) that carries the engine block."""
    return [path for path in sorted((root / "kernels").glob("*.py"))
            if not path.name.startswith("_") and block_span(path.read_text(), str(path)) is not None]


def stale_copies(root: Path = TOOL_DIR) -> list[str]:
    """The starters whose engine block differs from kernels/_gemm_engine.py's."""
    source = block_of((root / ENGINE_FILE).read_text(), ENGINE_FILE)
    return [str(path.relative_to(root)) for path in starters_with_block(root)
            if block_of(path.read_text(), str(path)) != source]


def sync(root: Path = TOOL_DIR) -> list[str]:
    """Copy the engine block into every starter that carries one; returns those changed."""
    source = block_of((root / ENGINE_FILE).read_text(), ENGINE_FILE)
    changed = []
    for path in starters_with_block(root):
        text = path.read_text()
        start, end = block_span(text, str(path))
        if text[start:end] != source:
            path.write_text(text[:start] + source + text[end:])
            changed.append(str(path.relative_to(root)))
    return changed


def table_literal(plans: dict) -> str:
    """GEMM_TABLE as Python source: one "dtype/kind/N/K" key a line, its [[M, plan], ...] sorted by M."""
    lines = ["GEMM_TABLE = {"]
    for key in sorted(plans, key=_table_order):
        entries = sorted([int(m), str(plan)] for m, plan in plans[key])
        lines.append(f"    {key!r}: {json.dumps(entries)},")
    return "\n".join(lines) + "\n}" if plans else "GEMM_TABLE = {}"


def _table_order(key: str) -> tuple:
    dtype, kind, n, k = key.split("/")
    return dtype, kind, int(n), int(k)


def check_plans(plans: object) -> dict:
    """The table's "plans" mapping, checked: "dtype/kind/N/K" -> [[M, "BMxBNxBK/wW/sS..."], ...]."""
    if not isinstance(plans, dict):
        raise ValueError("a GEMM table's \"plans\" must map \"dtype/kind/N/K\" to [[M, plan], ...]")
    for key, entries in plans.items():
        parts = key.split("/") if isinstance(key, str) else []
        if len(parts) != 4 or parts[1] not in ("plain", "dual") or not all(p.isdigit() for p in parts[2:]):
            raise ValueError(f"GEMM table key {key!r} is not dtype/plain|dual/N/K")
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], int)
                                                    and isinstance(e[1], str) and e[1].count("/") >= 2
                                                    for e in entries):
            raise ValueError(f"GEMM table entry {key!r} is not a list of [M, plan]")
    return plans


def install_table(table_path: Path, root: Path = TOOL_DIR) -> list[str]:
    """Write the plans of a sweep's gemm_table.json into the engine's GEMM_TABLE (and keep the file as
    kernels/gemm_table.json), then copy the block into the starters; returns the files changed."""
    table = json.loads(Path(table_path).read_text())
    plans = check_plans(table.get("plans") if isinstance(table, dict) else None)
    engine_path = root / ENGINE_FILE
    text = engine_path.read_text()
    node = next((n for n in ast.parse(text).body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "GEMM_TABLE" for t in n.targets)), None)
    if node is None:
        raise BlockError(f"{ENGINE_FILE} has no GEMM_TABLE assignment")
    lines = text.splitlines(keepends=True)
    new = "".join(lines[:node.lineno - 1]) + table_literal(plans) + "\n" + "".join(lines[node.end_lineno:])
    engine_path.write_text(new)
    kept = root / TABLE_FILE
    if Path(table_path).resolve() != kept.resolve():
        kept.write_text(json.dumps(table, indent=1) + "\n")
    return [ENGINE_FILE, TABLE_FILE] + sync(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report the starters whose copy differs")
    parser.add_argument("--table", help="a GPU sweep's gemm_table.json: install its plans, then copy the block")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_copies()
        for path in stale:
            print(f"{path}: its GEMM engine block differs from {ENGINE_FILE} "
                  f"(run python -m autokernel.core.starter_blocks)")
        return 1 if stale else 0
    changed = install_table(Path(args.table)) if args.table else sync()
    print("\n".join(f"wrote {path}" for path in changed) or "every starter's engine block is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
