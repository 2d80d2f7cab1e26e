"""The judge (bench.py) against every attack kernel of tests/attacks, every starter, and its own wall time.

    python benchmarks/judge.py attacks [options]             (python benchmarks/judge.py attacks --help)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages

from benchmarks.common import Subcommand, run_subcommand  # noqa: E402

SUBCOMMANDS = {
    "attacks": Subcommand("judge_attacks",
                          "every attack rejected at its stage, every starter PASSes, the judge's wall time"),
}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
