"""Turns the optimization plan's top entries into kernel jobs: starter kernels stamped with the model's shapes.

    python extract.py [--top N] [--plan workspace/optimization_plan.json] [--out DIR] [--backend triton|cuda|any]

The door in the layout: the command is autokernel/profile/extract_command.py (`python extract.py --help`).
"""

import sys

from autokernel.profile.extract_command import main

if __name__ == "__main__":
    sys.exit(main())
