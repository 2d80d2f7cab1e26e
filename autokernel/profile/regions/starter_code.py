"""Reads Inductor's wrapper code for a region: its Triton kernels, with what launches them, and its call steps.

Inductor's output (inductor.py) is a Python module: each kernel is a string of Triton source passed to
`async_compile.triton(...)`, decorated with a heuristics call that carries the launch metadata
(the kind of kernel, the grid it is launched on, the signature), and a `call(args)` function
allocates buffers and runs the kernels through Inductor's launcher. This module takes that apart
(with ast, never by running it) into records that starter.py writes out as a plain kernel file.
Anything in `call` that is not an allocation, a view, an alias or a launch of one of its own
kernels (a cuBLAS GEMM, an ATen fallback) makes the region's code unusable as a starter, and
`StarterError` says what it was.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

GRIDS_WE_LAUNCH = ("Grid1D", "Grid2D", "Grid3D", "FixedGrid")


class StarterError(Exception):
    """Inductor's code for the region cannot become a starter; the message says why."""


@dataclass
class Kernel:
    """One of Inductor's Triton kernels: its source (the jit function alone), kind and launch metadata."""
    name: str
    source: str                      # "def name(...):\n    ..." without decorators
    kind: str                        # pointwise, reduction, persistent_reduction, template...
    parameters: list[str]            # the def's parameters, in order
    constexprs: list[str]            # those annotated tl.constexpr (launch keywords)
    grid_type: str
    decorator: dict = field(default_factory=dict)   # num_warps / num_stages of a template
    origin: str = ""                 # Inductor's comment: the source nodes and ATen ops it covers
    fixed_numel: dict = field(default_factory=dict)  # ints the body assigns: xnumel, r0_numel, a GEMM's M, N, K
    body_constexprs: dict = field(default_factory=dict)  # NAME: tl.constexpr = value, in the body
    helpers: dict[str, str] = field(default_factory=dict)  # the @triton.jit functions it calls (a scan's combine)


@dataclass
class Launch:
    kernel: str
    args: list[ast.expr]             # the positional arguments of .run(...), the grid's values last for FixedGrid


@dataclass
class Wrapper:
    kernels: dict[str, Kernel]
    inputs: list[str]                # call's argument names, in order (the region's inputs)
    steps: list[ast.stmt | Launch]   # allocations, aliases and views (ast), and launches
    returns: list[ast.expr]


def read(code: str) -> Wrapper:
    tree = ast.parse(code)
    kernels = {}
    for node in tree.body:
        call = node.value if isinstance(node, ast.Assign) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "triton"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "async_compile"):
            name = ast.literal_eval(call.args[0])
            kernels[name] = _kernel(name, ast.literal_eval(call.args[1]), _origin(code, name))
    call_def = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"), None)
    if call_def is None:
        raise StarterError("Inductor's code has no call function")
    inputs, steps, returns = _steps(call_def.body, kernels)
    return Wrapper(kernels, inputs, steps, returns)


def fingerprint(code: str) -> str:
    """What a wrapper computes, its kernels' names and Inductor's metadata left out: two codes with the same
    fingerprint launch the same kernels the same way."""
    wrapper = read(code)
    sources = []
    for index, (name, kernel) in enumerate(wrapper.kernels.items()):
        sources += [*kernel.helpers.values(), kernel.source.replace(name, f"kernel{index}")]
    steps = [f"{step.kernel}{[ast.unparse(a) for a in step.args]}" if isinstance(step, Launch) else ast.unparse(step)
             for step in wrapper.steps]
    text = "\n".join(sources + steps)
    for index, name in enumerate(wrapper.kernels):
        text = text.replace(name, f"kernel{index}")
    return text


def _origin(code: str, name: str) -> str:
    at = code.find(f"{name} = async_compile.triton(")
    found = re.findall(r"# Topologically Sorted Source Nodes: (.*)", code[max(0, at - 20000):at])
    return found[-1].strip() if found else ""


def _kernel(name: str, source: str, origin: str) -> Kernel:
    tree = ast.parse(source)
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if function is None:
        raise StarterError(f"kernel {name}: no function of that name in its source")
    heuristics = next((d for d in function.decorator_list if isinstance(d, ast.Call)
                       and isinstance(d.func, ast.Attribute) and isinstance(d.func.value, ast.Name)
                       and d.func.value.id == "triton_heuristics"), None)
    if heuristics is None:
        raise StarterError(f"kernel {name}: no triton_heuristics decorator to read its launch from")
    keywords = {k.arg: k.value for k in heuristics.keywords}
    inductor_meta = keywords.get("inductor_meta")
    grid_type = _entry(inductor_meta, "grid_type") or "Grid1D"
    if grid_type not in GRIDS_WE_LAUNCH:
        raise StarterError(f"kernel {name} is launched on a {grid_type}, which the starter does not compute")
    decorator = {key: ast.literal_eval(keywords[key]) for key in ("num_warps", "num_stages") if key in keywords}
    lines = source.splitlines()
    text = "\n".join(lines[function.lineno - 1:function.end_lineno])
    parameters = [a.arg for a in function.args.args]
    constexprs = [a.arg for a in function.args.args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)]
    fixed, body_constexprs = {}, {}
    for statement in function.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name) \
                and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, int):
            fixed[statement.targets[0].id] = statement.value.value      # xnumel = 64; a template's M = 64
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) \
                and isinstance(statement.value, ast.Constant):
            body_constexprs[statement.target.id] = statement.value.value
    return Kernel(name, text, heuristics.func.attr, parameters, constexprs, grid_type, decorator, origin, fixed,
                  body_constexprs, _helpers(tree, function, lines))


def _helpers(tree: ast.Module, kernel: ast.FunctionDef, lines: list[str]) -> dict[str, str]:
    """The other @triton.jit functions of a kernel's source that it calls, decorator and all (Inductor writes a
    scan's combine function, `_triton_helper_fn_add0`, beside the kernel that passes it to tl.associative_scan)."""
    called = {node.id for node in ast.walk(kernel) if isinstance(node, ast.Name)}
    helpers = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node is not kernel and node.name in called \
                and any("jit" in ast.unparse(decorator) for decorator in node.decorator_list):
            start = min(decorator.lineno for decorator in node.decorator_list)
            helpers[node.name] = "\n".join(lines[start - 1:node.end_lineno])
    return helpers


def _entry(node: ast.expr | None, key: str):
    """A literal value of a dict literal's key, or None."""
    if not isinstance(node, ast.Dict):
        return None
    for k, v in zip(node.keys, node.values):
        if isinstance(k, ast.Constant) and k.value == key:
            try:
                return ast.literal_eval(v)
            except ValueError:
                return None
    return None


def _steps(body: list[ast.stmt], kernels: dict) -> tuple[list[str], list, list]:
    inputs: list[str] = []
    steps: list = []
    returns: list = []
    for statement in body:
        if isinstance(statement, ast.With):            # torch.cuda._DeviceGuard(0): the device is the inputs'
            more_inputs, more_steps, more_returns = _steps(statement.body, kernels)
            inputs += more_inputs
            steps += more_steps
            returns += more_returns
            continue
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name) and statement.value.id == "args":
            target = statement.targets[0]
            inputs = [e.id for e in target.elts] if isinstance(target, ast.Tuple) else [target.id]
            continue
        if isinstance(statement, (ast.Delete, ast.Pass)) or _is_call_to(statement, _IGNORED) \
                or _is_assertion(statement):
            continue
        if isinstance(statement, ast.Return):
            value = statement.value
            returns = list(value.elts) if isinstance(value, ast.Tuple) else [value]
            continue
        launch = _launch(statement, kernels)
        if launch is not None:
            steps.append(launch)
            continue
        if isinstance(statement, ast.Assign) and _allowed_value(statement.value):
            if isinstance(statement.value, ast.Call) and _callee(statement.value) == "get_raw_stream":
                continue
            steps.append(statement)
            continue
        raise StarterError(f"Inductor's code for it runs `{ast.unparse(statement)[:160]}`, which is not one of its own "
                           "Triton kernels (a library call); it has no Triton starter")
    return inputs, steps, returns


_IGNORED = ("args.clear", "torch.cuda.set_device", "get_raw_stream")
# Inductor's checks of its inputs (assert_size_stride, assert_alignment; newer releases' assert_size_stride_grouped,
# checking several at once): helpers of torch._C._dynamo.guards, all named assert_*, that check and compute nothing.
# Known by that pattern, not name by name, since each release may add one.
_ASSERTION = re.compile(r"(?:^|\.)assert_\w+$")
# Calls whose result a step may assign: allocations, views, and newer releases' copy_if_misaligned(x) (x itself
# when its data is 16-byte aligned, else an aligned copy; starter.py writes it out).
_ALLOCATIONS = ("empty_strided_cuda", "empty_strided_cpu", "empty_strided", "reinterpret_tensor", "get_raw_stream",
                "copy_if_misaligned")


def _callee(call: ast.Call) -> str:
    return ast.unparse(call.func)


def _is_call_to(statement: ast.stmt, names: tuple[str, ...]) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) and _callee(statement.value) in names


def _is_assertion(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
        and _ASSERTION.search(_callee(statement.value)) is not None


def _allowed_value(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return True
    return isinstance(value, ast.Call) and _callee(value) in _ALLOCATIONS


def _launch(statement: ast.stmt, kernels: dict) -> Launch | None:
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return None
    call = statement.value
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "run"
            and isinstance(call.func.value, ast.Name) and call.func.value.id in kernels):
        return None
    if any(k.arg not in ("stream",) for k in call.keywords):
        raise StarterError(f"{call.func.value.id} is launched with {', '.join(k.arg for k in call.keywords)}: "
                           "a launcher this starter does not know")
    return Launch(call.func.value.id, list(call.args))
