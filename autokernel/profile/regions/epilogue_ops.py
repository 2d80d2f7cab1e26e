"""Each pointwise ATen op an epilogue may hold, as a Triton expression on float32 values (epilogue.py reads the ops).

Arguments are expressions (variables of the epilogue, inputs it reads) or Python numbers; the result is a
float32 expression. Each entry computes what the ATen op computes (gelu's erf and tanh forms, softplus's
threshold, rsub's alpha...); a dtype cast to a 16-bit type rounds there and comes back to float32, as the
reference rounds. An op missing here makes the region's epilogue Unsupported: its starter stays Inductor's.
"""

from __future__ import annotations

FLOATS = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}


class Unsupported(Exception):
    """The region is not a GEMM with an epilogue this module can write; the message says what is in the way."""


def number(value) -> str:
    return repr(float(value))


def _arg(args: list, kwargs: dict, index: int, key: str, default=None):
    if index < len(args):
        return args[index]
    return kwargs.get(key, default)


def _x(value) -> str:
    return value if isinstance(value, str) else number(value)


def pointwise(name: str, args: list, kwargs: dict) -> str:
    """The Triton expression of one pointwise ATen op (by packet name) on float32 expressions and Python numbers."""
    a = _x(args[0]) if args else ""
    if name in ("add", "sub", "rsub"):
        b, alpha = _x(_arg(args, kwargs, 1, "other")), _arg(args, kwargs, 2, "alpha", 1)
        scaled = b if alpha == 1 else f"{number(alpha)} * {b}"
        return {"add": f"({a} + {scaled})", "sub": f"({a} - {scaled})",
                "rsub": f"({b} - {a if alpha == 1 else f'{number(alpha)} * {a}'})"}[name]
    if name == "mul":
        return f"({a} * {_x(args[1])})"
    if name == "div":
        if _arg(args, kwargs, 2, "rounding_mode") is not None:
            raise Unsupported("div with a rounding mode")
        return f"({a} / {_x(args[1])})"
    simple = {"neg": f"(-{a})", "relu": f"tl.maximum({a}, 0.0)", "sigmoid": f"tl.sigmoid({a})",
              "silu": f"({a} * tl.sigmoid({a}))", "tanh": f"libdevice.tanh({a})", "exp": f"tl.exp({a})",
              "log": f"tl.log({a})", "abs": f"tl.abs({a})", "sqrt": f"tl.sqrt({a})", "rsqrt": f"tl.rsqrt({a})",
              "reciprocal": f"(1.0 / {a})", "erf": f"libdevice.erf({a})", "log1p": f"libdevice.log1p({a})",
              "expm1": f"libdevice.expm1({a})",
              "hardsigmoid": f"tl.minimum(tl.maximum({a} / 6.0 + 0.5, 0.0), 1.0)",
              "hardswish": f"({a} * tl.minimum(tl.maximum({a} + 3.0, 0.0), 6.0) / 6.0)",
              "mish": f"({a} * libdevice.tanh(tl.where({a} > 20.0, {a}, libdevice.log1p(tl.exp({a})))))"}
    if name in simple:
        return simple[name]
    if name == "gelu":
        if _arg(args, kwargs, 1, "approximate", "none") == "tanh":
            return f"(0.5 * {a} * (1.0 + libdevice.tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a}))))"
        return f"(0.5 * {a} * (1.0 + libdevice.erf({a} * 0.7071067811865476)))"
    if name in ("clamp", "clamp_min", "clamp_max", "hardtanh"):
        defaults = {"hardtanh": (-1.0, 1.0)}.get(name, (None, None))
        low = _arg(args, kwargs, 1, "min_val" if name == "hardtanh" else "min", defaults[0])
        high = _arg(args, kwargs, 2, "max_val" if name == "hardtanh" else "max", defaults[1])
        if name == "clamp_max":
            low, high = None, _arg(args, kwargs, 1, "max")
        out = a
        if low is not None:
            out = f"tl.maximum({out}, {_x(low)})"
        if high is not None:
            out = f"tl.minimum({out}, {_x(high)})"
        return out
    if name in ("maximum", "minimum"):
        return f"tl.{name}({a}, {_x(args[1])})"
    if name == "leaky_relu":
        return f"tl.where({a} > 0.0, {a}, {a} * {number(_arg(args, kwargs, 1, 'negative_slope', 0.01))})"
    if name == "elu":
        alpha, scale, input_scale = (number(_arg(args, kwargs, i, k, 1.0)) for i, k in
                                     ((1, "alpha"), (2, "scale"), (3, "input_scale")))
        return f"tl.where({a} > 0.0, {scale} * {a}, {scale} * {alpha} * (tl.exp({a} * {input_scale}) - 1.0))"
    if name == "softplus":
        beta, threshold = number(_arg(args, kwargs, 1, "beta", 1.0)), number(_arg(args, kwargs, 2, "threshold", 20.0))
        return f"tl.where({a} * {beta} > {threshold}, {a}, libdevice.log1p(tl.exp({a} * {beta})) / {beta})"
    if name == "pow" and isinstance(args[1], (int, float)):
        exponent = float(args[1])
        return {2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 0.5: f"tl.sqrt({a})", 1.0: a}.get(
            exponent, f"libdevice.pow({a}, {number(exponent)})")
    if name in ("_to_copy", "to"):
        dtype = kwargs.get("dtype")
        dtype = dtype["dtype"] if isinstance(dtype, dict) else "float32"
        if set(kwargs) - {"dtype", "layout", "device", "pin_memory", "memory_format"} or dtype not in FLOATS:
            raise Unsupported(f"{name} to {dtype}")
        return a if dtype == "float32" else f"{a}.to({FLOATS[dtype]}).to(tl.float32)"
    raise Unsupported(f"the pointwise op {name}")
