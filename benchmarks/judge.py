"""The judge (bench.py) against every attack kernel of tests/attacks, every starter, and its own wall time.

    python benchmarks/judge.py attacks [options]             (attacks --help: its options)
    python benchmarks/judge.py sandbox [--out DIR]           (the sandbox with CUDA, its ways out, the user's check)
    python benchmarks/judge.py compile-pool [--out DIR]      (Inductor's compile workers in the sandbox, /dev/shm)

On a GPU, or on CPU (the GPU-only attacks skipped). The subcommands are modules of benchmarks/suites/.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages
from benchmarks.common import run_subcommand  # noqa: E402

# subcommand -> its module in benchmarks/suites/ (whose docstring's first line is the subcommand's help)
SUBCOMMANDS = {"attacks": "judge_attacks", "sandbox": "sandbox_check", "compile-pool": "compile_pool"}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
