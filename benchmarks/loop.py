"""The optimization loop: experiments per hour on one GPU and several, the judge over many seeds, the LLM agent.

    python benchmarks/loop.py SUBCOMMAND [options]           (SUBCOMMAND --help: what it measures, its options)

Each subcommand is a module of benchmarks/suites/. seed-sweep, llm-soak and budget-check run on CPU too (Triton's
interpreter); throughput needs --gpus GPUs; llm-facts shows the agent's prompt on this machine.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages
from benchmarks.common import run_subcommand  # noqa: E402

# subcommand -> its module in benchmarks/suites/ (whose docstring's first line is the subcommand's help)
SUBCOMMANDS = {"throughput": "multi_gpu_throughput", "seed-sweep": "seed_sweep", "llm-soak": "llm_soak",
               "llm-facts": "llm_gpu_facts", "budget-check": "budget_check"}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv, prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
