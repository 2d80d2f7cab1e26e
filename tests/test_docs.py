"""docs/architecture.md is a map a newcomer can trust: at most 20 KB, and every command, module and file it names
exists (issue 37); so do those of the documents it links (docs/*.md). Commands are read from code spans and blocks:
`python -m MODULE` names a module of the project, `python FILE` a file of it, `autokernel SUBCOMMAND --flag` a
subcommand of the real command line and one of its flags; every path named is a file or folder of the project, and
every document linked exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from autokernel import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAP = DOCS / "architecture.md"
MAP_LIMIT_BYTES = 20 * 1024
# What the map names that a clone does not hold: the user's model, the run's outputs, and what the wheel's build
# makes (setup.py writes autokernel/_layout/).
NOT_IN_THE_CLONE = {"model.py", "results.tsv", "state.json", "payload.pt", "NODE_IP/gpuN"}   # the last: Ray's label
NOT_IN_THE_CLONE_FOLDERS = ("workspace/", "optimized_kernels/", "autokernel/_layout/")
PATH_SUFFIXES = (".py", ".md", ".json", ".tsv", ".pt")

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PYTHON_MODULE = re.compile(r"(?<![\w.-])python -m ([A-Za-z_][\w.<>]*)")
PYTHON_FILE = re.compile(r"(?<![\w.-])python (?!-)(\S+\.py)\b")
AUTOKERNEL = re.compile(r"(?<![\w./-])autokernel ((?:[a-z]+\|)*[a-z]+)([^`\n]*)")


def code_texts(markdown: str) -> list[str]:
    """The map's code: each fenced block's lines, then each inline span outside the blocks."""
    blocks = FENCE.findall(markdown)
    lines = [line for block in blocks for line in block.splitlines()[1:-1]]
    return lines + SPAN.findall(FENCE.sub("", markdown))


def _subcommands() -> tuple[dict[str, argparse.ArgumentParser], set[str]]:
    """The command line's subcommands, and the flags taken anywhere on the line (--workdir)."""
    parser = cli._build_parser()
    [action] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(action.choices), set(parser._option_string_actions)


def _runnable(module: str) -> bool:
    """Whether `python -m module` runs something: a module of the project with a __main__ block, or a package of it
    with a __main__.py."""
    base = ROOT.joinpath(*module.split("."))
    file = base.with_suffix(".py")
    return (file.is_file() and 'if __name__ == "__main__":' in file.read_text()) or (base / "__main__.py").is_file()


def command_errors(texts: list[str]) -> tuple[list[str], int]:
    """What is wrong with the commands these texts name, and how many commands they name."""
    errors, count = [], 0
    subcommands, anywhere = _subcommands()
    for text in texts:
        for module in PYTHON_MODULE.findall(text):
            if "<" in module:                   # a pattern: python -m autokernel.<module>
                continue
            count += 1
            if not _runnable(module):
                errors.append(f"python -m {module}: no such runnable module")
        for file in PYTHON_FILE.findall(text):
            count += 1
            if not (ROOT / file).is_file():
                errors.append(f"python {file}: no such file")
        for names, rest in AUTOKERNEL.findall(text.replace("python -m autokernel.cli ", "autokernel ")):
            for name in names.split("|"):
                count += 1
                parser = subcommands.get(name)
                if parser is None:
                    errors.append(f"autokernel {name}: no such subcommand")
                elif parser.add_help:           # the commands handed on (profile, bench...) take their own flags
                    for flag in re.findall(r"(?<!\S)(--[a-z][\w-]*)", rest):
                        if flag not in parser._option_string_actions and flag not in anywhere:
                            errors.append(f"autokernel {name} {flag}: no such flag")
    return errors, count


def _is_path(span: str) -> bool:
    return (re.fullmatch(r"[\w./-]+", span) is not None and not span.startswith(("-", ".")) and " " not in span
            and ("/" in span or span.endswith(PATH_SUFFIXES)))


def _exists(path: str) -> bool:
    if path in NOT_IN_THE_CLONE or path.startswith(NOT_IN_THE_CLONE_FOLDERS):
        return True
    package = ROOT / "autokernel"
    # A path is written from the project's root, from the package's (`core/paths.py`), or inside the folder its
    # sentence is about (`regions/` of a layer, `pick.py` of profile/regions/).
    bases = [ROOT, *(folder for folder in [package, *package.rglob("*")] if folder.is_dir()
                     and folder.name != "__pycache__")]
    return any((base / path).exists() for base in bases)


def path_errors(markdown: str, folder: Path) -> tuple[list[str], int]:
    """The paths the map's code names (spans, and path-shaped words in blocks) and the documents it links to,
    that do not exist; and how many it names."""
    named = [span for span in SPAN.findall(FENCE.sub("", markdown)) if _is_path(span)]
    for line in (line for block in FENCE.findall(markdown) for line in block.splitlines()[1:-1]):
        named += [word for word in re.findall(r"[\w./-]+", line) if _is_path(word) and "/" in word.strip("/.")]
    errors = [f"{path}: no such file or folder" for path in named if not _exists(path.rstrip("."))]
    links = [link for link in LINK.findall(markdown) if "://" not in link]
    errors += [f"link {link}: no such document" for link in links if not (folder / link).exists()]
    return errors, len(named) + len(links)


def test_the_map_is_at_most_20_kb():
    assert len(MAP.read_bytes()) <= MAP_LIMIT_BYTES


def test_every_command_the_map_names_exists():
    errors, count = command_errors(code_texts(MAP.read_text()))
    assert errors == [] and count >= 10


def test_every_path_and_document_the_map_names_exists():
    errors, count = path_errors(MAP.read_text(), DOCS)
    assert errors == [] and count >= 30


@pytest.mark.parametrize("document", sorted(path.name for path in DOCS.glob("*.md")))
def test_every_document_of_the_map_names_commands_and_paths_that_exist(document):
    markdown = (DOCS / document).read_text()
    assert command_errors(code_texts(markdown))[0] == [] and path_errors(markdown, DOCS)[0] == []


def test_the_checks_find_a_wrong_command_flag_module_path_and_link():
    markdown = ("See [gone](gone.md) and `autokernel/core/nowhere.py`, `core/paths.py`, `regions/`.\n\n"
                "```\nrun python -m autokernel.judge.bench and python -m autokernel.judge.nowhere,\n"
                "    not python -m autokernel.<x>\n"
                "    nor python -m autokernel.judge.stages (no __main__)\n"
                "    then autokernel profile|frobnicate and see search/nowhere.py\n```\n\n"
                "`python reference.py`, `python nowhere.py`, `autokernel optimize --budget 1h --no-such-flag`, "
                "`python -m autokernel.cli optimize --gpus 2`, `autokernel bench --anything`\n")
    errors, count = command_errors(code_texts(markdown))
    assert sorted(errors) == ["autokernel frobnicate: no such subcommand",
                              "autokernel optimize --no-such-flag: no such flag",
                              "python -m autokernel.judge.nowhere: no such runnable module",
                              "python -m autokernel.judge.stages: no such runnable module",
                              "python nowhere.py: no such file"]
    assert count == 11
    errors, _ = path_errors(markdown, DOCS)
    assert sorted(errors) == ["autokernel/core/nowhere.py: no such file or folder", "link gone.md: no such document",
                              "search/nowhere.py: no such file or folder"]


def test_the_documents_the_map_moved_out_are_linked_from_it():
    linked = set(LINK.findall(MAP.read_text()))
    assert {path.name for path in DOCS.glob("*.md")} - {MAP.name} <= linked
