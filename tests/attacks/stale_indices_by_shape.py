"""Attack: torch.max(x, dim)'s indices computed once per shape and handed out again.

The values are fresh every call, and each returned tensor is a fresh copy, so no buffer is ever
returned twice; but the indices are those of the first input of that shape. Rejected: the next
input of that shape (another dtype, another seed) gets indices that are wrong.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "reduce"
_indices = {}


def _first_of_its_shape(x, dim, op, values, indices):
    return values, _indices.setdefault((tuple(x.shape), dim, op), indices).clone()


kernel_fn = runpy.run_path(str(Path(__file__).with_name("_reduce_parts.py")))["kernel_fn_changing_pairs"](
    _first_of_its_shape)
