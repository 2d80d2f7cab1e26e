"""A region's starter kernel: the Triton code torch.compile's Inductor generated for it, as a plain kernel.py.

The file (`write`) holds Inductor's own @triton.jit kernels, unchanged but for their decorators; the
launch grid of each, computed from the sizes Inductor passes it as its launcher would; the config
Inductor chose for each (on a GPU, the one its autotuner kept; without one, starter sizes of our
own for Triton's interpreter: `default_config`) as TUNABLES, with TUNABLE_CHOICES around them for
the built-in search; and `kernel_fn`, which allocates what Inductor's `call` allocated and launches
the kernels in its order. So the first experiment of a region's job runs at torch.compile's speed
by construction; the loop's work is to beat it. Under Triton's interpreter libdevice's functions
come from autokernel/core/interpreter_libdevice.py.
"""

from __future__ import annotations

import ast
import re

import torch
import triton

from autokernel.kernel_types.regions.record import Region
from autokernel.profile.regions import template_tiles
from autokernel.profile.regions.starter_code import Kernel, Launch, StarterError, Wrapper, read

BLOCKS = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK")
WARPS = [1, 2, 4, 8, 16]
STAGES = [1, 2, 3, 4]
_NUMELS = {"XBLOCK": "xnumel", "YBLOCK": "ynumel", "ZBLOCK": "znumel", "R0_BLOCK": "r0_numel", "R1_BLOCK": "r1_numel"}
_INTERPRETER_TILE = 4096         # elements per program in the interpreter: fewer, larger programs run faster there
_GPU_TILE = 1024                 # where a GPU's autotuner's choice could not be read: Inductor's usual pointwise tile


def default_config(kernel: Kernel, numels: dict[str, int]) -> dict:
    """Block sizes for a kernel nothing autotuned (generated without a GPU; or on one, where the configs Inductor's
    autotuners kept could not be read): tiles of about 4096 elements for the interpreter, 1024 for a GPU."""
    tile = _GPU_TILE if torch.cuda.is_available() else _INTERPRETER_TILE
    config: dict = {"num_warps": kernel.decorator.get("num_warps", 4), "num_stages": kernel.decorator.get("num_stages", 1)}
    blocks = [b for b in BLOCKS if b in kernel.constexprs]
    fixed = 1
    for name in ("R0_BLOCK", "R1_BLOCK"):
        if name in kernel.body_constexprs:
            fixed *= int(kernel.body_constexprs[name])
    for name in reversed(blocks):          # reduction blocks first, then z, y, x
        size = triton.next_power_of_2(max(1, numels.get(_NUMELS[name], 1)))
        limit = 1024 if name.startswith("R") else max(1, tile // fixed)
        config[name] = min(size, limit)
        fixed *= config[name]
    return config


def _choices(name: str, value: int) -> list[int]:
    if name == "num_warps":
        return WARPS
    if name == "num_stages":
        return STAGES
    return [v for v in (2 ** i for i in range(13)) if value // 8 <= v <= value * 8]


def write(region: Region, code: str | dict[str, tuple[str, dict]], configs: dict[str, dict] | None = None, *,
          generated_on: str, versions: str) -> str:
    """The starter's source for a region from Inductor's code for it (inductor.generate).

    `code` is one wrapper module, or several by variant name ({"inductor": (code, configs), "looped": ...}, the
    first the one the file runs): then each variant's kernels are in the file (renamed after the first), kernel_fn
    runs the one TUNABLES["variant"] names, and the built-in search can move between them. A variant may also be
    code of our own, an object whose `emit` takes _variant_body's arguments (gemm_variant.GemmVariant)."""
    if not region.definition.inputs:      # kernel_fn finds its device on its first input
        raise StarterError("the region reads no tensor")
    variants = code if isinstance(code, dict) else {"inductor": (code, configs or {})}
    parameters = [i.name for i in region.definition.inputs]
    tunables: dict = {}
    choices: dict = {}
    kernels: list[str] = []
    legend: list[str] = []
    bodies: dict[str, list[str]] = {}
    for index, (variant, made) in enumerate(variants.items()):
        suffix = "" if index == 0 else f"_{variant}"
        if hasattr(made, "emit"):
            bodies[variant] = made.emit(region, suffix, tunables, choices, kernels, legend)
            continue
        variant_code, variant_configs = made
        bodies[variant] = _variant_body(region, read(variant_code), variant_configs, suffix, tunables, choices,
                                        kernels, legend)
    if len(variants) == 1:
        body = bodies[next(iter(variants))]
        helpers = ""
    else:
        tunables["variant"] = next(iter(variants))
        choices["variant"] = list(variants)
        body = [f"if TUNABLES['variant'] == {name!r}:\n        return _{name}({', '.join(parameters)})"
                for name in variants]
        body.append(f"raise ValueError(f\"TUNABLES['variant'] is one of {list(variants)}\")")
        helpers = "".join(f"\n\ndef _{name}({', '.join(parameters)}):\n" + "\n".join(f"    {line}" for line in lines)
                          + "\n" for name, lines in bodies.items())
    return _TEMPLATE.format(
        describe=region.describe(), sources="\n".join(f"    {line.show()}" for line in region.about.sources),
        generated_on=generated_on, versions=versions, name=region.name, legend="\n".join(legend),
        tunables=_literal(tunables), choices=_literal(choices), kernels="\n\n\n".join(kernels),
        signature=", ".join(parameters), body="\n".join(f"    {line}" for line in body),
        variants=_variants_note(variants)) + helpers


VARIANT_NOTES = {"inductor": "Inductor's own code", "looped": "Inductor's, persistent reductions off",
                 "unsplit": "Inductor's, long reductions not split",
                 "engine": "the menu matmul's GEMM on the tensor cores (tf32x3 for float32) with this region's "
                           "epilogue in its tile",
                 "depthwise": "a direct depthwise convolution, a tile of one output plane a program"}


def _variants_note(variants: dict) -> str:
    if len(variants) == 1:
        return ""
    listed = "; ".join(f"{name}: {VARIANT_NOTES.get(name, name)}" for name in variants)
    return f"\n\nTUNABLES['variant'] runs one of these variants: {listed}."


def _variant_body(region: Region, wrapper: Wrapper, configs: dict, suffix: str, tunables: dict, choices: dict,
                  kernels: list[str], legend: list[str]) -> list[str]:
    """One variant's kernel_fn lines (its kernels, renamed with suffix, appended to `kernels`)."""
    launched = [step.kernel for step in wrapper.steps if isinstance(step, Launch)]
    if not launched:
        raise StarterError("Inductor's code for it launches no Triton kernel")
    order = list(dict.fromkeys(launched))
    first = len(legend)
    short = {name: f"k{first + index}" for index, name in enumerate(order)}
    for name in order:                 # a later variant's kernels renamed: one file holds every variant's
        kernel = wrapper.kernels[name]
        kernel.source = kernel.source.replace(f"def {name}(", f"def {name + suffix}(", 1)
        kernel.name = name + suffix
    lines = []
    renames = {old: new for old, new in zip(wrapper.inputs, (i.name for i in region.definition.inputs))}
    for step in wrapper.steps:
        if isinstance(step, Launch):
            kernel = wrapper.kernels[step.kernel]
            lines += _launch_lines(kernel, step, short[step.kernel], configs.get(step.kernel), tunables, choices,
                                   renames)
        else:
            lines.append(ast.unparse(_Rewrite(renames).visit(step)))
    returned = [ast.unparse(_Rewrite(renames).visit(value)) for value in wrapper.returns]
    lines.append(f"return {returned[0]}" if len(returned) == 1 else f"return ({', '.join(returned)})")
    for name in order:          # the helpers a kernel calls first, each once (a later variant's renamed like its kernels)
        kernel = wrapper.kernels[name]
        for helper, source in kernel.helpers.items():
            if suffix:
                kernel.source = re.sub(rf"\b{helper}\b", helper + suffix, kernel.source)
                source = re.sub(rf"\b{helper}\b", helper + suffix, source)
            if source not in kernels:
                kernels.append(source)
        kernels.append(f"@triton.jit\n{kernel.source}")
    legend += [f"#   {short[name]}: {name + suffix}" for name in order]
    return [f"device = {region.definition.inputs[0].name}.device"] + lines


def _literal(values: dict) -> str:
    return "{\n" + "".join(f"    {key!r}: {value!r},\n" for key, value in values.items()) + "}"


def _launch_lines(kernel: Kernel, step: Launch, short: str, chosen: dict | None, tunables: dict, choices: dict,
                  renames: dict) -> list[str]:
    runtime = [p for p in kernel.parameters if p not in kernel.constexprs]
    args = [ast.unparse(_Rewrite(renames).visit(arg)) for arg in step.args]
    grid_values, args = (args[len(runtime):], args[:len(runtime)]) if kernel.grid_type == "FixedGrid" else ([], args)
    if kernel.grid_type == "FixedGrid" and not template_tiles.lifted(kernel):
        template_tiles.lift(kernel, grid_values)
    if template_tiles.lifted(kernel) and kernel.grid_type == "FixedGrid":      # the programs the tiles make
        grid_values = template_tiles.grid(kernel, grid_values, short)
    if len(args) != len(runtime):
        raise StarterError(f"{kernel.name} takes {len(runtime)} arguments, Inductor passed {len(step.args)}")
    numels = {}
    for name, value in zip(runtime, step.args):
        if name.endswith("numel"):
            if not isinstance(value, ast.Constant):
                raise StarterError(f"{kernel.name}'s {name} is not a constant: the starter is for static shapes")
            numels[name] = int(value.value)
    config = dict(chosen) if chosen else default_config(kernel, numels)
    tiles = template_tiles.blocks(kernel) if template_tiles.lifted(kernel) else ()
    config.update({name: kernel.body_constexprs[name] for name in tiles})
    keywords = []
    for name in kernel.constexprs:
        if name not in config:
            raise StarterError(f"{kernel.name} takes the constexpr {name}, which no config gives")
        key = f"{short}_{name}"
        tunables.setdefault(key, int(config[name]))
        choices.setdefault(key, template_tiles.choices(kernel, name) if name in tiles else _choices(name, tunables[key]))
        keywords.append(f"{name}=TUNABLES[{key!r}]")
    for name in ("num_warps", "num_stages"):
        key = f"{short}_{name}"
        tunables.setdefault(key, int(config.get(name, 4 if name == "num_warps" else 1)))
        choices.setdefault(key, _choices(name, tunables[key]))
        keywords.append(f"{name}=TUNABLES[{key!r}]")
    grid = _grid(kernel, numels, grid_values, short)
    comment = [f"# {kernel.origin}"] if kernel.origin else []
    return comment + [f"{kernel.name}[{grid}]({', '.join(args + keywords)})"]


def _grid(kernel: Kernel, numels: dict, fixed: list[str], short: str) -> str:
    if kernel.grid_type == "FixedGrid":
        return f"({', '.join(fixed)},)" if len(fixed) == 1 else f"({', '.join(fixed)})"
    sides = []
    for block, numel in (("XBLOCK", "xnumel"), ("YBLOCK", "ynumel"), ("ZBLOCK", "znumel")):
        if numel not in numels:
            continue
        size = numels[numel]
        sides.append(f"triton.cdiv({size}, TUNABLES[{f'{short}_{block}'!r}])" if block in kernel.constexprs
                     else str(size))
    if kernel.grid_type == "Grid1D":
        return f"({sides[0]},)"
    return f"({', '.join(sides + ['1'] * (3 - len(sides)))})"


class _Rewrite(ast.NodeTransformer):
    """Inductor's wrapper names and helpers as plain torch: its argument names become the region's inputs'."""

    def __init__(self, renames: dict):
        self.renames = renames

    def visit_Name(self, node: ast.Name):
        return ast.copy_location(ast.Name(self.renames.get(node.id, node.id), node.ctx), node)

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        callee = ast.unparse(node.func)
        if callee in ("empty_strided_cuda", "empty_strided_cpu", "empty_strided"):
            size, stride, dtype = node.args[:3]
            return ast.parse(f"torch.empty_strided({ast.unparse(size)}, {ast.unparse(stride)}, "
                             f"dtype={ast.unparse(dtype)}, device=device)", mode="eval").body
        if callee == "reinterpret_tensor":
            return ast.parse(f"torch.as_strided({', '.join(ast.unparse(a) for a in node.args)})", mode="eval").body
        if callee == "copy_if_misaligned":         # newer Inductor: the input, or an aligned copy of it (same strides)
            x = ast.unparse(node.args[0])
            return ast.parse(f"{x} if {x}.data_ptr() % 16 == 0 else torch.empty_strided({x}.size(), {x}.stride(), "
                             f"dtype={x}.dtype, device={x}.device).copy_({x})", mode="eval").body
        return node


_TEMPLATE = '''"""Region {name}: {describe}.

The model's PyTorch source it covers:
{sources}

Starter: the Triton code torch.compile's Inductor generated for this region ({versions}, on {generated_on}),
made a plain kernel file: Inductor's kernels as it wrote them, the launch grid its launcher computes for
each, the config it chose for each as TUNABLES (without a GPU nothing was autotuned: starter sizes for
Triton's interpreter), and kernel_fn in place of its wrapper. It runs at torch.compile's speed; beat it.{variants}
"""

import os

import torch
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import math as tl_math

if os.environ.get("TRITON_INTERPRET") == "1":     # Triton's interpreter cannot call CUDA's libdevice
    from autokernel.core.interpreter_libdevice import libdevice
else:
    from torch._inductor.runtime.triton_helpers import libdevice

KERNEL_TYPE = "{name}"

# The kernels, in launch order:
{legend}
TUNABLES = {tunables}
TUNABLE_CHOICES = {choices}


{kernels}


def kernel_fn({signature}):
{body}
'''
