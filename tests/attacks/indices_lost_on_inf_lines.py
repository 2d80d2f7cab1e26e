"""Attack: torch.max(x, dim)'s indices that start from -1 and a running maximum of -inf.

A strict comparison never moves off the start in a line of nothing but -inf (for a min, +inf),
so that line keeps index -1. Right on every finite input. Rejected: the adversarial inputs hold
such a line, whose index is 0.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "reduce"
kernel_fn = runpy.run_path(str(Path(__file__).with_name("_reduce_parts.py")))["kernel_fn_with_sloppy_indices"](
    start=-1)
