"""One definition per kernel type (autokernel/kernel_types/): a type's registry entry, how the profiler recognises
it and how verify routes it live in its own module, and the generic machinery names no type."""

import ast
import functools
import importlib
import io
import pkgutil
import re
import tokenize
from pathlib import Path

import pytest

from autokernel import kernel_types
from autokernel.kernel_types import registry
from autokernel.kernel_types.base import FoldType
from autokernel.profile import classify
from autokernel.routing import routes
from autokernel.routing.fold_routing import FOLD_TYPES

ROOT = Path(__file__).resolve().parents[1]
# The modules that iterate over the types: none may name one.
GENERIC_MODULES = ["autokernel/kernel_types/registry.py", "autokernel/profile/classify.py", "autokernel/routing/routes.py",
                   "autokernel/routing/router.py", "autokernel/routing/decisions.py", "autokernel/routing/fold_routing.py",
                   "autokernel/routing/norm_folding.py", "autokernel/verify/route_table.py",
                   "autokernel/kernel_types/__init__.py", "autokernel/kernel_types/base.py"]
TYPE_NAMES = sorted(registry.REGISTRY, key=len, reverse=True)


def _package_modules() -> dict[str, object]:
    return {info.name: importlib.import_module(f"autokernel.kernel_types.{info.name}")
            for info in pkgutil.iter_modules(kernel_types.__path__) if info.name not in kernel_types.NOT_TYPES}


HELPER_MODULES = {f"autokernel.kernel_types.{name}" for name, module in _package_modules().items()
                  if not hasattr(module, "KERNEL_TYPE")}


def _callables(kernel_type) -> list:
    """Every function a type's recognition, routing and fold hand to the generic machinery."""
    recognise, route, fold = kernel_type.recognise, kernel_type.route, kernel_type.fold
    found = [recognise.op_shape, recognise.claims_op, recognise.module, recognise.replaces_module,
             route.module_variants, *route.functions.values()]
    if recognise.function is not None:
        found += [recognise.function.is_name, recognise.function.touched, recognise.function.joins,
                  recognise.function.shape]
    if fold is not None:
        found += [fold.is_norm, fold.is_consumer, fold.read, fold.site_shape]
        if fold.plannable is not FoldType.__dataclass_fields__["plannable"].default:
            found.append(fold.plannable)
    return [f for f in found if f is not None]


def _defined_in(func) -> str:
    while isinstance(func, functools.partial):
        func = func.func
    return func.__module__


def test_every_type_is_the_module_named_after_it_and_every_such_module_is_registered():
    type_modules = {name: module for name, module in _package_modules().items() if hasattr(module, "KERNEL_TYPE")}
    assert set(type_modules) == set(registry.REGISTRY)
    for name, module in type_modules.items():
        assert module.KERNEL_TYPE is registry.get(name) and module.KERNEL_TYPE.name == name
    assert HELPER_MODULES == {"autokernel.kernel_types.base", "autokernel.kernel_types.mlps",
                              "autokernel.kernel_types.norms"}
    # The layer's modules that are not types (the registry, the references, regions/) define none.
    assert not any(hasattr(importlib.import_module(f"autokernel.kernel_types.{name}"), "KERNEL_TYPE")
                   for name in kernel_types.NOT_TYPES)


@pytest.mark.parametrize("name", sorted(registry.REGISTRY))
def test_a_types_recogniser_and_route_are_defined_in_its_own_module(name):
    kernel_type = registry.get(name)
    own = f"autokernel.kernel_types.{name}"
    # Each type is recognised in a trace somehow (by op, by module or as a fold) and routed somehow.
    recognise = kernel_type.recognise
    assert recognise.op_shape or recognise.module or kernel_type.fold, f"{name}: the profiler cannot see it"
    assert kernel_type.route.functions or kernel_type.route.module_variants or kernel_type.fold, \
        f"{name}: verify cannot route it"
    assert bool(kernel_type.profiled_ops or recognise.claims_op) == bool(recognise.op_shape), \
        f"{name}: ops counted as the type without a shape reader, or the reverse"
    for func in _callables(kernel_type):
        module = _defined_in(func)
        # Its own module, or a helper the package shares between types (norms for the two norms): never
        # another type's module, nor the generic machinery.
        assert module == own or module in HELPER_MODULES - {"autokernel.kernel_types.base"}, \
            f"{name}: {getattr(func, '__name__', func)} is defined in {module}"


def test_a_torch_function_is_routed_by_one_type_at_most():
    claimed = [func for kt in registry.REGISTRY.values() for func in kt.route.functions]
    assert len(claimed) == len(set(claimed))
    assert len(routes.FUNCTION_ROUTES) == len(claimed)


def test_an_ops_kernel_type_comes_from_the_registry_and_is_one_type_at_most():
    from autokernel.kernel_types import reduce

    claimed = [op for kt in registry.REGISTRY.values() for op in kt.profiled_ops]
    assert len(claimed) == len(set(claimed)), "an op listed by two kernel types"
    assert classify._OP_KERNEL_TYPES["aten::addmm"] == "matmul" and classify._OP_KERNEL_TYPES["aten::amin"] == "reduce"
    # the reduce ops classify reads an op name from are exactly the ones the reduce entry claims
    assert set(reduce._OPS) == registry.get("reduce").profiled_ops
    # aten::max is a reduction over a dim or over all, or elementwise: the type's op_shape tells them apart
    assert classify._OP_KERNEL_TYPES["aten::max"] == "reduce"


def test_fold_types_have_distinct_preferences_in_order():
    assert list(FOLD_TYPES) == ["rmsnorm_mlp", "rmsnorm_linear"]
    assert len({fold.preference for fold in FOLD_TYPES.values()}) == len(FOLD_TYPES)


# --------------------------------------------------------------------------- the generic modules name no type
def type_names_in_code(source: str) -> list[str]:
    """The kernel type names a module's code uses: in identifiers, attributes, imports and string constants,
    its docstrings and comments left out (they may name types as examples)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.append(node.name)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, ast.alias):
            words += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
    found = []
    for word in words:
        lowered = word.lower()
        for name in TYPE_NAMES:
            if name in lowered:
                found.append(f"{name} in {word!r}")
                lowered = lowered.replace(name, "")
    return found


def test_the_check_finds_a_type_named_in_code_but_not_in_docs_or_comments():
    assert type_names_in_code('"""Softmax and matmul, as examples."""\nx = 1  # rmsnorm\n') == []
    assert type_names_in_code('if kernel_type == "rmsnorm":\n    pass\n') == ["rmsnorm in 'rmsnorm'"]
    assert type_names_in_code("_MATMUL_OPS = set()\n") == ["matmul in '_MATMUL_OPS'"]
    assert type_names_in_code("from autokernel.kernel_types import fused_mlp\n") == ["fused_mlp in 'fused_mlp'"]
    assert type_names_in_code('FOLD = ("rmsnorm_mlp",)\n') == ["rmsnorm_mlp in 'rmsnorm_mlp'"]


@pytest.mark.parametrize("path", GENERIC_MODULES)
def test_the_generic_modules_name_no_kernel_type(path):
    source = (ROOT / path).read_text()
    assert type_names_in_code(source) == [], f"{path} hardcodes kernel types"
    # and no comment-free line spells one as a bare word either (a check ast could miss, such as an f-string)
    code = "".join(token.string + " " for token in tokenize.generate_tokens(io.StringIO(source).readline)
                   if token.type not in (tokenize.COMMENT, tokenize.STRING))
    assert not [name for name in TYPE_NAMES if re.search(rf"\b{name}\b", code)]


@pytest.mark.parametrize("name", [name for name, kind in registry.REGISTRY.items() if kind.pytorch_op])
def test_pytorch_s_own_op_computes_the_reference_at_every_shape_it_is_timed_in_place_of(name):
    # The judge times pytorch_op as PyTorch's bar (eager and compiled) instead of the reference: it must be the same
    # function at every shape, or the bar would be another computation's time.
    import torch

    kind = registry.get(name)
    for seed, shape in enumerate(kind.cpu_sweep + kind.cpu_edge_shapes + [kind.smoke_shape]):
        inputs = kind.inputs(shape, torch.float32, seed, "cpu")
        torch.testing.assert_close(kind.pytorch(**inputs), kind.reference(**inputs), atol=1e-5, rtol=1e-4,
                                   msg=lambda m: f"{registry.format_shape(shape)}: {m}")
    assert registry.get("flash_attention").pytorch is not registry.get("flash_attention").reference
    assert registry.get("softmax").pytorch is registry.get("softmax").reference
