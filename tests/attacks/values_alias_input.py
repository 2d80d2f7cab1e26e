"""Attack: torch.max(x, dim)'s values as a view of the input.

A slice of x along dim costs nothing to return and is right wherever the first element of a line
is its extreme (every line of a size-1 dim); a model that later writes into x would change them.
Rejected: no output may share memory with an input, whichever of a tuple's tensors it is.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "reduce"
kernel_fn = runpy.run_path(str(Path(__file__).with_name("_reduce_parts.py")))["kernel_fn_changing_pairs"](
    lambda x, dim, op, values, indices: (x.select(dim, 0), indices))
