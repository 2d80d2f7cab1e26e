"""Plugs the optimized kernels into the model and proves the end-to-end result: the same output, and which path is faster.

    python verify.py [MODEL] [--optimized-dir optimized_kernels | --starters] [--route measured|all] [--overhead] ...

The door in the layout: the command, its options and its exit codes are autokernel/verify/verify_command.py
(`python verify.py --help`).
"""

import sys

from autokernel.verify.verify_command import main

if __name__ == "__main__":
    sys.exit(main())
