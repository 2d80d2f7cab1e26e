"""What every test process starts from: on a machine without a CUDA GPU, Triton's interpreter, switched on as the
package's entry points switch it (autokernel/core/interpreter.py), so in-process tests run kernels as the judge's
worker does, at its speed.

(Session 13 tried the `slow` tests first with pytest-xdist handing out one test at a time: 23 minutes on two cores,
and 26 without it on the same machine that afternoon, against 15.5 that morning; no gain shown, so xdist's own
order stays.)
"""

from autokernel.core import interpreter

interpreter.choose()
