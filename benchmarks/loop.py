"""The optimization loop: its throughput on one and several GPUs, the judge's numbers over seeds, the LLM agent.

    python benchmarks/loop.py SUBCOMMAND [options]           (python benchmarks/loop.py SUBCOMMAND --help)

Each subcommand is a module of benchmarks/suites/.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # run as a script: the repository's packages

from benchmarks.common import Subcommand, run_subcommand  # noqa: E402

SUBCOMMANDS = {
    "throughput": Subcommand("multi_gpu_throughput",
                             "experiments per hour of `autokernel optimize`, --gpus 1 against --gpus N"),
    "seed-sweep": Subcommand("seed_sweep",
                             "every starter on every adversarial case, many seeds, the judge's rule (CPU too)"),
    "llm-soak": Subcommand("llm_soak", "the loop against a misbehaving local LLM server, killed and resumed (CPU)"),
    "llm-facts": Subcommand("llm_gpu_facts",
                            "what the LLM agent is told on a GPU: launch grids, launch floor, the prompt"),
}


def main(argv: list[str] | None = None) -> int:
    return run_subcommand(__doc__, SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
