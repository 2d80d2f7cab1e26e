"""libdevice for Triton's interpreter: the math functions Inductor's kernels call, as numpy on the interpreter's arrays.

Triton's interpreter (TRITON_INTERPRET=1, how kernels run without a GPU) runs a kernel's Python with
numpy arrays in its tensors, but libdevice's functions are calls into CUDA's math library, which it
cannot make. A region's starter (Inductor's code, autokernel/profile/regions/starter.py) imports this in
their place when it runs in the interpreter, and libdevice itself on a GPU. Each function here does
what its libdevice namesake does, element by element, in the argument's own precision.
"""

from __future__ import annotations

import math

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import TensorHandle

_erf, _erfc, _lgamma = np.vectorize(math.erf), np.vectorize(math.erfc), np.vectorize(math.lgamma)


def _data(value):
    return value.handle.data if isinstance(value, tl.tensor) else np.asarray(value)


def _like(values: list):
    return next((v for v in values if isinstance(v, tl.tensor)), None)


def _wrap(data, like, predicate: bool = False):
    data = np.asarray(data)
    if predicate:
        scalar = tl.int1
        data = data.astype(np.bool_)
    else:
        scalar = like.dtype.scalar if like is not None else tl.float32
        data = data.astype(like.handle.data.dtype if like is not None else np.float32)
    shape = list(data.shape)
    kind = tl.block_type(scalar, shape) if like is not None and like.type.is_block() else scalar
    return tl.tensor(TensorHandle(data, scalar), kind)


def _elementwise(function, predicate: bool = False):
    def apply(*args, _semantic=None, **kwargs):
        like = _like(list(args))
        with np.errstate(all="ignore"):
            arrays = [_data(arg) for arg in args]
            wide = [a.astype(np.float64) if a.dtype.kind == "f" and a.dtype.itemsize < 4 else a for a in arrays]
            return _wrap(function(*wide), like, predicate)
    return apply


_FUNCTIONS = {
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "exp10": lambda x: np.power(10.0, x), "log": np.log,
    "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": _erf, "erfc": _erfc, "lgamma": _lgamma, "floor": np.floor,
    "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint, "round": np.round,
    "abs": np.abs, "fabs": np.abs, "pow": np.power, "atan2": np.arctan2, "fmod": np.fmod,
    "copysign": np.copysign, "hypot": np.hypot, "fmin": np.fmin, "fmax": np.fmax, "nextafter": np.nextafter,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "div_rn": np.divide, "fdiv_rn": np.divide,
}
_PREDICATES = {"isnan": np.isnan, "isinf": np.isinf, "isfinited": np.isfinite, "finitef": np.isfinite,
               "signbit": np.signbit}


class _Libdevice:
    """The functions above by name; a name libdevice has and this does not fails when the kernel calls it."""

    def __getattr__(self, name: str):
        if name in _FUNCTIONS:
            return _elementwise(_FUNCTIONS[name])
        if name in _PREDICATES:
            return _elementwise(_PREDICATES[name], predicate=True)
        raise AttributeError(f"libdevice.{name} has no stand-in for Triton's interpreter "
                             "(autokernel/core/interpreter_libdevice.py)")


libdevice = _Libdevice()
