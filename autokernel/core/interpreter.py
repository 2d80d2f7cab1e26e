"""Without a CUDA GPU, Triton kernels run in Triton's interpreter on CPU tensors: the one switch for it.

Triton reads TRITON_INTERPRET when a kernel is decorated, that is when a kernel file is imported,
and torch._dynamo (torch.compile) imports triton early. So every entry point calls `choose()`
first, before it imports anything that imports triton: bench.py's worker (the judge itself runs no
Triton), verify.py, profile.py, `autokernel optimize`, and the Python API's optimize() and
plug_in(). Nothing switches it as a side effect of an import.

With the interpreter on, `choose()` also makes Triton's interpreter patch triton.language once per launch instead of
once per call of a @jit helper (see `_patch_once_per_launch`): the same results in about half the time; and makes
a scalar broadcast to a block keep the block's type (see `_splat_in_the_blocks_type`), and tl.dot multiply bfloat16
values rather than their bits (see `_dot_bfloat16_as_floats`); and it looks numpy dtypes up in a table made once
(see `_numpy_dtypes_from_a_table`).
"""

from __future__ import annotations

import os
import sys

_CHOSEN_TOO_LATE = False


def choose() -> bool:
    """Switch Triton to its interpreter when there is no CUDA GPU; returns whether the interpreter is on."""
    global _CHOSEN_TOO_LATE
    import torch

    if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
        _CHOSEN_TOO_LATE = _CHOSEN_TOO_LATE or "triton" in sys.modules
        os.environ["TRITON_INTERPRET"] = "1"
    on = os.environ.get("TRITON_INTERPRET") == "1"
    if on:
        _patch_once_per_launch()
        _splat_in_the_blocks_type()
        _dot_bfloat16_as_floats()
        _numpy_dtypes_from_a_table()
    return on


def problem() -> str | None:
    """Why the kernels cannot run here, when the switch came after triton was imported; None when all is well."""
    if _CHOSEN_TOO_LATE:
        return ("there is no CUDA GPU, so the kernels must run in Triton's interpreter, but triton was imported "
                "before autokernel could switch it on: set TRITON_INTERPRET=1 in the environment, or import "
                "autokernel before torch.compile / triton")
    return None


def _patch_once_per_launch() -> bool:
    """Skip Triton's interpreter's repeated patching of triton.language inside one launch; False where this
    Triton's interpreter lacks the names it wraps (nothing is changed there).

    The interpreter patches triton.language's modules (scanning each with inspect.getmembers) when a kernel is
    launched, undoing it after the launch, and again, never undone, on every call of a @jit helper from inside the
    kernel: tl.max, tl.sum, tl.cdiv are such helpers, so a softmax program patches a dozen times, half its time
    (Triton 3.9). Inside a launch the modules a helper's patch covers stay patched until the launch ends (the launch's
    own patch, or a helper's earlier one, which nothing undoes), so patching them again changes nothing: that is
    the call skipped. The launch's own patch, and the first patch of modules not yet covered, run as before.
    """
    try:
        import triton.language as tl
        from triton.runtime import interpreter as triton_interpreter
        patch_lang, grid_call = triton_interpreter._patch_lang, triton_interpreter.GridExecutor.__call__
        empty_scope = triton_interpreter._LangPatchScope
    except (ImportError, AttributeError):
        return False
    if getattr(patch_lang, "autokernel_once_per_launch", False):
        return True
    launch = {"depth": 0, "patched": set()}      # launches under way; ids of the modules patched in this one

    def patch_once(fn):
        langs = {id(value) for value in fn.__globals__.values() if value is tl or value is tl.core}
        if launch["depth"] and launch["patched"] and langs <= launch["patched"]:
            return empty_scope()
        scope = patch_lang(fn)
        if launch["depth"]:
            launch["patched"] |= langs
        return scope

    def launch_call(self, *args, **kwargs):
        launch["depth"] += 1
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            launch["depth"] -= 1
            if not launch["depth"]:
                launch["patched"] = set()

    patch_once.autokernel_once_per_launch = True
    triton_interpreter._patch_lang = patch_once
    triton_interpreter.GridExecutor.__call__ = launch_call
    return True


def _splat_in_the_blocks_type() -> bool:
    """Make Triton's interpreter broadcast a scalar into a block of the block's element type; False where this
    Triton's interpreter lacks the names it wraps (nothing is changed there).

    The interpreter labels a comparison's result with its operands' type (int32 for `pid < BATCH`) though its
    values are booleans, and its splat converts the values to that label: a scalar comparison broadcast into a
    block mask becomes int32, and a store under that mask fails ("mask has unsupported dtype"). Inductor's batched
    matmul template masks its store with `idx_q < BATCH` (torch 2.13, Triton 3.9), so every region starter with a
    bmm failed its check on the CPU and was dropped. The block type says what the values are (int1 for a mask).
    """
    try:
        import numpy as np
        from triton.runtime import interpreter as triton_interpreter
        builder, to_numpy = triton_interpreter.InterpreterBuilder, triton_interpreter._get_np_dtype
        handle = triton_interpreter.TensorHandle
    except (ImportError, AttributeError):
        return False
    if getattr(builder.create_splat, "autokernel_block_type", False):
        return True

    def create_splat(self, ret_ty, arg):
        value = arg.data[0] if arg.data.ndim else arg.data
        return handle(np.full(ret_ty.shape, value, dtype=to_numpy(ret_ty)), ret_ty.element_ty)

    create_splat.autokernel_block_type = True
    builder.create_splat = create_splat
    return True


def _dot_bfloat16_as_floats() -> bool:
    """Make Triton's interpreter's tl.dot multiply bfloat16 operands as the numbers they are; False where this
    Triton's interpreter lacks the names it wraps (nothing is changed there).

    The interpreter holds bfloat16 values as their 16 bits in uint16 arrays, and its dot multiplies those arrays
    as they are: the integers the bits spell, not the numbers (off by 1e10 in a bfloat16 Linear + ReLU region
    under autocast, whose starter was then dropped on the CPU). Its own casts read the bits right; the operands
    go through them to float32 first, which a float32 accumulator gives the same products as the GPU's.
    """
    try:
        import triton.language as tl
        from triton.runtime import interpreter as triton_interpreter
        builder = triton_interpreter.InterpreterBuilder
        dot = builder.create_dot
    except (ImportError, AttributeError):
        return False
    if getattr(dot, "autokernel_bfloat16", False):
        return True

    def create_dot(self, a, b, d, *args, **kwargs):
        a, b = (self.cast_impl(x, tl.float32) if x.dtype.scalar == tl.bfloat16 else x for x in (a, b))
        return dot(self, a, b, d, *args, **kwargs)

    create_dot.autokernel_bfloat16 = True
    builder.create_dot = create_dot
    return True


def _numpy_dtypes_from_a_table() -> bool:
    """Make Triton's interpreter look up a Triton dtype's numpy dtype in a table made once; False where this Triton's
    interpreter lacks the names it wraps (nothing is changed there).

    Its `_get_np_dtype`, called for nearly every value it makes, builds its dict of 17 dtypes anew on every call: 9%
    of the CPU a flash attention edge shape takes (issue 37). The table holds the interpreter's own answers, for the
    dtypes its dict names; anything else (a pointer, a type it does not know) is still its own function's to answer.
    """
    try:
        import triton.language as tl
        from triton.runtime import interpreter as triton_interpreter
        own = triton_interpreter._get_np_dtype
    except (ImportError, AttributeError):
        return False
    if getattr(own, "autokernel_table", False):
        return True
    names = ("int1", "float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
             "uint64", "bfloat16", "float8e5", "float8e5b16", "float8e4nv", "float8e4b8", "float8e4b15")
    table = {}
    for name in names:
        dtype = getattr(tl, name, None)
        if isinstance(dtype, tl.dtype) and not isinstance(dtype, tl.pointer_type):
            try:
                table[dtype] = own(dtype)
            except KeyError:
                continue

    def get_np_dtype(tt_dtype):
        element = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        found = None if isinstance(element, tl.pointer_type) else table.get(element)
        return own(tt_dtype) if found is None else found

    get_np_dtype.autokernel_table, get_np_dtype.autokernel_own = True, own
    triton_interpreter._get_np_dtype = get_np_dtype
    return True
