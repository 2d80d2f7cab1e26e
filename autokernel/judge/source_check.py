"""What a kernel file may do, read from its source before any of it runs (the judge's first line; the worker's
runtime guards, autokernel/judge/candidate/worker_guards.py, stay behind it as the second).

A kernel file is code an LLM wrote to be fast, and a process of its own cannot hide what it does from
Python itself: a thread or a dispatch mode set aside runs PyTorch unseen, a socket or a fork talks past the
judge, sys.modules and os.environ tell the judge's process from a user's. Read as source, with ast (nothing
is imported or run), a file may:
  - import only what a kernel needs (IMPORTS, FROM_IMPORTS): torch, Triton, math and a few pure helpers;
    no os, sys, threading, subprocess, socket, ctypes, signal, gc, inspect, importlib, numpy...;
  - not use the builtins that run, import or reach code by name (FORBIDDEN_BUILTINS: exec, eval, open,
    __import__, globals...), a dunder name or attribute (`x.__class__`, `__builtins__`), a private
    attribute (`torch._C`, `x._version`) except its own (`self._cache`), an attribute named like a module
    it may not import (`torch.os`, `libdevice.np`), or getattr with a name it computes;
  - not assign to or delete an attribute of a module (`torch.matmul = ...`);
  - outside its @triton.jit functions (kernel_fn and the Python around it), use PyTorch only to allocate,
    view, copy and cast: a torch function outside TORCH_ALLOWED, a tensor method in COMPUTE_METHODS
    (x.sum(), x.softmax()), or `@` is PyTorch computing the result.
The one use of os a region's starter makes (autokernel/profile/regions/starter.py: which libdevice to import,
by os.environ.get("TRITON_INTERPRET")) is allowed, and no other use of os.

SOURCE_CHECK_ENV=0 turns the check off: for tests of the layers behind it, never for the loop.
"""

from __future__ import annotations

import ast
import re

SOURCE_CHECK_ENV = "AUTOKERNEL_SOURCE_CHECK"
MAX_PROBLEMS_SHOWN = 5

# Modules a kernel file may import whole (and their own names from them).
IMPORTS = frozenset({"torch", "triton", "triton.language", "math", "typing", "functools", "dataclasses",
                     "itertools", "collections", "enum", "__future__"})
# Modules a kernel file may import only these names from (the shipped starters' and the region starters' imports).
FROM_IMPORTS = {
    "triton.tools.tensor_descriptor": {"TensorDescriptor"},
    "triton.language.extra": {"libdevice"},
    "triton.language.extra.cuda": {"libdevice"},
    "torch._subclasses.fake_tensor": {"is_fake"},
    "torch._inductor.runtime": {"triton_helpers"},
    "torch._inductor.runtime.triton_helpers": {"math", "libdevice"},
    "autokernel.judge.cuda_build": {"load_cuda", "sm90a_flags"},
    "autokernel.core.interpreter_libdevice": {"libdevice"},
}
# typing's names that evaluate strings as code.
FORBIDDEN_FROM = {"typing": {"get_type_hints", "ForwardRef", "evaluate_forward_ref"}}
FORBIDDEN_BUILTINS = frozenset({"__import__", "exec", "eval", "compile", "open", "globals", "locals", "vars", "dir",
                                "setattr", "delattr", "breakpoint", "input", "help", "exit", "quit", "id",
                                "memoryview", "__builtins__", "__build_class__", "__loader__", "__spec__"})
DUNDER_NAMES_ALLOWED = frozenset({"__name__", "__doc__", "__all__", "__slots__"})
# Dunder attributes that lead nowhere (super().__init__(), a function's __name__); every other one is refused.
DUNDER_ATTRIBUTES_ALLOWED = frozenset({"__init__", "__post_init__", "__name__", "__doc__", "__qualname__"})
# Modules a kernel may not reach: an attribute of one of these names is refused wherever it is (torch.os, np).
FORBIDDEN_MODULES = frozenset({
    "os", "sys", "subprocess", "ctypes", "socket", "threading", "multiprocessing", "signal", "gc", "inspect",
    "importlib", "builtins", "numpy", "np", "shutil", "pathlib", "io", "pickle", "marshal", "mmap", "tempfile",
    "posix", "resource", "fcntl", "selectors", "asyncio", "concurrent", "types", "weakref", "runpy",
    "pty", "code", "codeop", "linecache", "operator", "time", "random", "secrets", "atexit", "faulthandler",
    "tracemalloc", "sysconfig", "platform", "urllib", "http", "ssl", "pdb", "traceback", "warnings", "copyreg",
    "cpp_extension", "typing_extensions"})
# Attributes that lead from an object to frames, code and globals (a generator's gi_frame.f_back.f_globals is the
# worker's own module, os and all).
FORBIDDEN_ATTRIBUTES = frozenset({
    "get_type_hints", "ForwardRef", "evaluate_forward_ref", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame",
    "cr_code", "cr_await", "ag_frame", "ag_code", "f_back", "f_globals", "f_locals", "f_builtins", "f_code",
    "tb_frame", "tb_next", "co_code", "mro", "format_map"})
# A format string that reads a private attribute of its argument ("{0._version}", "{0.__class__}"): str.format
# reads it, unseen by the rules on attributes above.
_FORMAT_ATTRIBUTE = re.compile(r"\{[\w.\[\]]*\._")
# What `torch.<name>` may be: functions that allocate, view, copy or cast, and what is not compute at all.
TORCH_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange",
    "tensor", "as_strided", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "permute", "t",
    "narrow", "select", "split", "chunk", "unbind", "movedim", "view_as_real", "view_as_complex",
    "device", "dtype", "Size", "Tensor", "finfo", "iinfo", "is_tensor", "is_floating_point", "is_complex",
    "promote_types", "result_type", "broadcast_shapes", "get_default_dtype", "no_grad", "inference_mode",
    "cuda", "version", "backends", "float", "half", "double", "long", "int", "short", "bool", "cfloat", "cdouble",
    "bfloat16", "SymInt", "get_float32_matmul_precision", "is_grad_enabled", "is_inference_mode_enabled",
    "are_deterministic_algorithms_enabled", "get_default_device"})
_TORCH_DTYPE = re.compile(r"(u?int\d+|float\d+(_\w+)?|bfloat16|complex\d+|q?u?int\d+x?\d*|bits\w+)$")
# Tensor methods that compute (outside @triton.jit code, where Python runs, only PyTorch has them); names that
# Python's own types share (list.sort, set.add) are left to the runtime guard.
COMPUTE_METHODS = frozenset({
    "sum", "mean", "prod", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "softmax", "log_softmax",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "gelu",
    "silu", "erf", "sin", "cos", "abs", "neg", "reciprocal", "pow", "square", "matmul", "mm", "bmm", "addmm",
    "addmv", "baddbmm", "mv", "dot", "einsum", "outer", "mul", "mul_", "add_", "sub", "sub_", "div", "div_",
    "true_divide", "floor_divide", "remainder", "fmod", "clamp", "clamp_", "clip", "where", "masked_fill",
    "masked_fill_", "masked_scatter", "scatter", "scatter_", "scatter_add", "scatter_reduce", "gather",
    "index_select", "index_add", "index_add_", "take", "cumsum", "cumprod", "logcumsumexp", "logsumexp", "norm",
    "var", "std", "var_mean", "std_mean", "topk", "argsort", "kthvalue", "median", "all", "any",
    "eq", "ne", "lt", "le", "gt", "ge", "equal", "allclose", "isclose", "isnan", "isinf", "isfinite",
    "nan_to_num", "round", "floor", "ceil", "trunc", "sign", "lerp", "addcmul", "addcdiv", "maximum", "minimum",
    "fmax", "fmin", "numpy", "tril", "triu", "flip", "roll", "layer_norm", "rms_norm", "linear", "conv1d",
    "conv2d", "dropout", "cross_entropy", "nll_loss", "baddbmm_", "addmm_", "exp_", "sigmoid_",
    "tanh_", "relu_", "sqrt_", "rsqrt_", "pow_", "nansum", "nanmean", "count_nonzero", "bincount", "histc",
    "unique", "cummax", "cummin", "softplus", "hardtanh", "mish", "glu", "bitwise_and", "bitwise_or",
    "bitwise_xor", "bitwise_not", "logical_and", "logical_or", "logical_not", "logical_xor"})
# Methods a class may not define: PyTorch's hooks into every op, a finalizer that runs when the collector says,
# attribute lookups of its own.
FORBIDDEN_DEFS = frozenset({"__torch_function__", "__torch_dispatch__", "__del__", "__getattr__", "__getattribute__",
                            "__init_subclass__", "__set_name__", "__reduce__", "__reduce_ex__", "__class_getitem__"})
# What CUDA C++ source (a BACKEND = "cuda" file's) may not call on the host: processes, files, sockets, the
# environment, threads, shared memory and the dynamic loader.
_CPP_FORBIDDEN = re.compile(
    r"\b(system|popen|fork|vfork|exec[lv]p?e?|posix_spawnp?|socket|connect|dlopen|dlsym|syscall|getenv|setenv|putenv|"
    r"ptrace|kill|shm_open|shmget|shmat|msgget|semget|mmap|memfd_create|fopen|freopen|open|openat|creat|"
    r"pthread_create|unlink|rename|remove|chmod|readlink|opendir)\s*\(|\bstd::(thread|async|jthread)\b|"
    r"\b[io]?fstream\b|#\s*include\s*[<\"](unistd|fcntl|dlfcn|spawn|thread|fstream|sys/[^>\"]*)|"
    r"##|\basm\s*\(\s*\"\w+\"\s*\)\s*;")     # token pasting, an asm label: a forbidden name spelled otherwise
_CPP_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class SourceRejected(Exception):
    """The kernel file does something a kernel may not; the message says what, and where."""


def check(source: str, filename: str = "kernel.py") -> None:
    """Raise SourceRejected with the first problems in the file's source, if it has any."""
    found = problems(source, filename)
    if found:
        more = f" (and {len(found) - MAX_PROBLEMS_SHOWN} more)" if len(found) > MAX_PROBLEMS_SHOWN else ""
        raise SourceRejected(f"{filename} does what a kernel file may not: " + "; ".join(found[:MAX_PROBLEMS_SHOWN])
                             + more + ". A kernel file imports only torch, triton, triton.language, math, typing, "
                             "functools, dataclasses, itertools, collections and enum, and uses PyTorch outside its "
                             "@triton.jit functions only to allocate, view, copy and cast")


def problems(source: str, filename: str = "kernel.py") -> list[str]:
    """Each thing the source does that a kernel file may not, as 'line N: what' (empty: none)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return []          # the worker's import reports it, with its line
    checker = _Checker()
    checker.visit(tree)
    return list(dict.fromkeys(checker.problems))


def _dotted(node: ast.AST) -> list[str] | None:
    """['torch', 'cuda', 'synchronize'] for torch.cuda.synchronize; None for what is not a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_jit(function: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(decorator) for decorator in function.decorator_list)


def _interpret_check(node: ast.AST) -> bool:
    """os.environ.get("TRITON_INTERPRET"): the one use of os a region's starter makes."""
    return (isinstance(node, ast.Call) and _dotted(node.func) == ["os", "environ", "get"] and len(node.args) == 1
            and not node.keywords and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "TRITON_INTERPRET")


class _Checker(ast.NodeVisitor):
    def __init__(self):
        self.problems: list[str] = []
        self.modules: dict[str, str] = {}       # a name bound by an import -> the module or name it stands for
        self.jit_depth = 0
        self.allowed_os: set[int] = set()       # id() of the os Name nodes in os.environ.get("TRITON_INTERPRET")

    def note(self, node: ast.AST, what: str) -> None:
        self.problems.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    # ------------------------------------------------------------------ imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "os" and alias.asname is None:
                self.modules["os"] = "os"       # checked where it is used: only os.environ.get("TRITON_INTERPRET")
            elif alias.name not in IMPORTS:
                self.note(node, f"imports {alias.name}")
            else:
                bound = alias.asname or alias.name.split(".")[0]
                self.modules[bound] = alias.name if alias.asname else bound

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.note(node, "a relative import")
            return
        for alias in node.names:
            name = alias.name
            full = f"{module}.{name}"
            allowed = (name in FROM_IMPORTS.get(module, ()) or full in IMPORTS
                       or (module in IMPORTS and name != "*" and not name.startswith("_")
                           and name not in FORBIDDEN_FROM.get(module, ()) and name not in FORBIDDEN_MODULES
                           and (module != "torch" or name in TORCH_ALLOWED or _TORCH_DTYPE.match(name))))
            if not allowed:
                self.note(node, f"imports {name} from {module}")
            else:
                self.modules[alias.asname or name] = full

    # ------------------------------------------------------------------ names and attributes
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self.note(node, f"uses {node.id}")
        elif _is_dunder(node.id) and node.id not in DUNDER_NAMES_ALLOWED:
            self.note(node, f"uses {node.id}")
        elif node.id == "os" and self.modules.get("os") == "os" and id(node) not in self.allowed_os:
            self.note(node, "uses os (a kernel may read only os.environ.get('TRITON_INTERPRET'))")
        elif node.id == "getattr":
            self.note(node, "uses getattr other than getattr(obj, 'a_public_name')")
        elif isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in self.modules and node.id != "os":
            self.note(node, f"rebinds the module name {node.id}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        noted = len(self.problems)
        self._attribute(node, node.attr, node.value)
        own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")     # its own class's members
        if self.jit_depth == 0 and node.attr in COMPUTE_METHODS and len(self.problems) == noted and not own:
            chain = _dotted(node.value)
            settings = chain and self.modules.get(chain[0]) == "torch" and chain[1:2] == ["backends"]
            if not (settings or chain and self.modules.get(chain[0], "").startswith(("math", "triton"))):
                self.note(node, f"uses {ast.unparse(node)}: PyTorch computing outside @triton.jit code")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _dotted(node.value)
            if root and root[0] in self.modules:
                self.note(node, f"{'assigns' if isinstance(node.ctx, ast.Store) else 'deletes'} "
                                f"{ast.unparse(node)}, an attribute of a module")
        self.visit(node.value)

    def _attribute(self, node: ast.AST, name: str, base: ast.AST) -> None:
        if _is_dunder(name) and name not in DUNDER_ATTRIBUTES_ALLOWED:
            self.note(node, f"reads the attribute {name}")
        elif name.startswith("_") and not _is_dunder(name) and not (isinstance(base, ast.Name)
                                                                     and base.id in ("self", "cls")):
            self.note(node, f"reads the private attribute {name} ({ast.unparse(base)}.{name})")
        elif name in FORBIDDEN_MODULES:
            self.note(node, f"reaches the module {name} through {ast.unparse(base)}")
        elif name in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"reads the attribute {name}")
        chain = _dotted(base)
        if chain and self.modules.get(chain[0]) == "torch" and len(chain) == 1:
            if name not in TORCH_ALLOWED and not _TORCH_DTYPE.match(name):
                self.note(node, f"uses torch.{name}: outside @triton.jit code PyTorch may only allocate, view, "
                                "copy and cast")

    def visit_Call(self, node: ast.Call) -> None:
        if _interpret_check(node):
            self.allowed_os.add(id(node.func.value.value))
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            name = node.args[1] if len(node.args) >= 2 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and not node.keywords:
                self._attribute(node, name.value, node.args[0])
                for arg in node.args:
                    self.visit(arg)
                return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _FORMAT_ATTRIBUTE.search(node.value):
            self.note(node, "a format string that reads a private attribute of its argument")
        if isinstance(node.value, str) and ("#include" in node.value or "__global__" in node.value):
            found = _CPP_FORBIDDEN.search(_CPP_COMMENT.sub("", node.value))
            if found:
                self.note(node, f"CUDA C++ source that calls {found.group(0).strip()} (host code may only launch "
                                "kernels)")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and self.jit_depth == 0:
            self.note(node, "multiplies matrices with @ outside @triton.jit code (PyTorch's matmul)")
        self.generic_visit(node)

    # ------------------------------------------------------------------ functions
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in FORBIDDEN_DEFS:
            self.note(node, f"defines {node.name}")
        jit = _is_jit(node)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns:
            self.visit(node.returns)
        self.jit_depth += jit
        for statement in node.body:
            self.visit(statement)
        self.jit_depth -= jit

    visit_AsyncFunctionDef = visit_FunctionDef
