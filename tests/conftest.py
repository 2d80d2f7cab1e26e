"""What every test process starts from: on a machine without a CUDA GPU, Triton's interpreter, switched on as the
package's entry points switch it (autokernel/core/interpreter.py), so in-process tests run kernels as the judge's
worker does, at its speed."""

from autokernel.core import interpreter

interpreter.choose()
