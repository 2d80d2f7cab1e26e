"""Attack: LayerNorm that ignores the eps it is given and uses the judge's default.

The honest starter, called with eps fixed at 1e-5: the judge's random rows have a variance near 1, where eps
changes nothing a tolerance can see, and its other cases all carried eps=1e-5. A model's eps is its own (BERT
1e-12, some vision models 1e-6, others 1e-2), and where a row's variance is near it the output is off by the
ratio of the two. The judge must draw rows whose variance is near eps, at two eps far apart, so that no one
fixed eps passes both.
"""

import runpy
from pathlib import Path

KERNEL_TYPE = "layernorm"
_starter = runpy.run_path(str(Path(__file__).resolve().parents[2] / "kernels" / "layernorm.py"))["kernel_fn"]


def kernel_fn(x, weight, bias, eps=1e-5, dim=-1):
    return _starter(x, weight, bias, 1e-5, dim)
