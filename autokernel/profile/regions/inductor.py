"""Runs torch.compile's Inductor on one region and keeps what it generated: its wrapper code and the configs it chose.

The region's definition becomes an FX graph of its ATen ops (`region_module`), compiled with
fullgraph=True at the region's shapes; GEMMs and convolutions are compiled with max-autotune and
Inductor's Triton GEMM and convolution templates (a cuBLAS or cuDNN call would be a library's
compute, which the judge refuses inside a kernel; template_convolution.py makes each convolution
one a template takes).
  - On a GPU the compiled region runs once on drawn inputs, so Inductor autotunes as it does in a
    model; the config each kernel's autotuner kept (block sizes, warps, stages) is read back.
  - Without one (CI), Inductor's Triton backend for CPU (torch._inductor.config.cpu_backend =
    "triton") generates the same kind of code; its output is captured before Inductor would load it
    (there is no GPU driver to compile it for), and the starter runs it in Triton's interpreter with
    block sizes of its own (starter.default_config), since nothing was autotuned (a template takes its
    first config).
Inductor's caches are off for this compile, so its code is generated anew and can be captured.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import torch

from autokernel.core.errors import failure_line
from autokernel.kernel_types.regions import ops
from autokernel.kernel_types.regions.graph import RegionDefinition, decode
from autokernel.kernel_types.regions.inputs import make_inputs
from autokernel.profile.regions.template_convolution import template_convolution


class InductorFailed(Exception):
    """Inductor generated nothing usable for the region; the message says why."""


@dataclass
class InductorOutput:
    code: str                                   # the wrapper module's source, kernels inside it
    configs: dict[str, dict] = field(default_factory=dict)   # kernel name -> chosen kwargs, num_warps, num_stages
    device: str = "cpu"
    versions: str = ""


def region_module(definition: RegionDefinition, device: torch.device) -> torch.fx.GraphModule:
    """The region's ops as an FX graph module taking its inputs in order and returning its outputs as a tuple."""
    graph = torch.fx.Graph()
    env: dict = {}
    shapes: dict = {}          # graph node -> its shape, for the convolutions' rewriting
    for item in definition.inputs:
        env[item.name] = graph.placeholder(item.name)
        shapes[env[item.name]] = item.shape

    def value(arg):
        if isinstance(arg, list):
            return [value(a) for a in arg]
        if isinstance(arg, dict) and "ref" in arg:
            return env[arg["ref"]]
        return decode(arg, env, device, None)

    for node in definition.nodes:
        args, kwargs = tuple(value(a) for a in node.args), {k: value(v) for k, v in node.kwargs.items()}
        if node.op == _CONVOLUTION and len(args) == 9 and not kwargs:
            env[node.name] = template_convolution(graph, shapes.__getitem__, *args)
        else:
            env[node.name] = graph.call_function(ops.resolve(node.op), args, kwargs)
        shapes[env[node.name]] = node.shape
    graph.output(tuple(env[name] for name in definition.outputs))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


_CONVOLUTION = "aten.convolution.default"


class _Captured(Exception):
    """Raised once Inductor's code is in hand on a machine without a GPU, to stop it loading that code."""


@contextlib.contextmanager
def _capturing(codes: list[str], stop: bool):
    from torch._inductor.graph import GraphLowering

    def save(code: str) -> None:
        codes.append(code)
        if stop:
            raise _Captured()

    before = GraphLowering.save_output_code
    GraphLowering.save_output_code = staticmethod(save)
    try:
        yield
    finally:
        GraphLowering.save_output_code = before


@contextlib.contextmanager
def _cpu_triton():
    """Inductor's Triton backend for CPU, generating code only: without a GPU driver Triton names no backend,
    whose hash Inductor writes into each kernel's metadata, so a fixed one stands in."""
    import torch.utils._triton as triton_utils
    from torch._inductor import config

    before = triton_utils.triton_hash_with_backend
    triton_utils.triton_hash_with_backend = lambda: "AUTOKERNEL-CPU-CODEGEN"
    try:
        with config.patch(cpu_backend="triton"), _first_choice_only():
            yield
    finally:
        triton_utils.triton_hash_with_backend = before


@contextlib.contextmanager
def _first_choice_only():
    """Max-autotune takes a template's first config: without a GPU it would time every config in Triton's
    interpreter (over a minute for a small depthwise convolution), for timings that mean nothing."""
    try:
        from torch._inductor.select_algorithm import get_algorithm_selector_cache

        steps = get_algorithm_selector_cache().preprocessing_fns
    except (ImportError, AttributeError):          # a torch release without the hook: every config is timed
        yield
        return

    def first(choices: list) -> list:
        return choices[:1]

    steps.append(first)
    try:
        yield
    finally:
        if first in steps:
            steps.remove(first)


@contextlib.contextmanager
def _precompile_threads():
    """Max-autotune precompiles a template's configs in threads, as many as the CPUs this process may use.

    Inductor takes that number from TORCHINDUCTOR_COMPILE_THREADS where it is set, the variable that also sizes its
    pool of compile-worker processes. The GPU gate sets it to 1 (eight verify runs side by side start no pools:
    benchmarks/suites/zoo.py; 2 before that), and so each GEMM or convolution region's configs compiled one after
    another: the gate's profile+starters phase grew from session 15 (unset: 16 threads) to 16 (2, then 1) in the
    models with such regions only (ResNet-18 48 -> 72-80 s, MobileNet 66 -> 92-96 s, EfficientNet 76 -> 110-135 s;
    the LSTM, layernorm and maxpool the same). Threads start no process and hold no memory of their own, so they
    take the CPUs whatever the pool's size (benchmarks/suites/precompile_threads.py times both ways)."""
    try:
        from torch._inductor import select_algorithm

        pool_size = select_algorithm.get_num_workers
    except (ImportError, AttributeError):        # a torch release without it: Inductor's own choice
        yield
        return
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    select_algorithm.get_num_workers = lambda: max(pool_size(), cpus)
    try:
        yield
    finally:
        select_algorithm.get_num_workers = pool_size


def generate(definition: RegionDefinition, device: torch.device, *, persistent_reductions: bool = True,
             split_reductions: bool = True, seed: int = 0, autotune: bool = True) -> InductorOutput:
    """Inductor's code for the region on this device (see the module's docstring). Where no GEMM template fits
    (Inductor keeps none for some small GEMMs), its native matmul (tl.dot in its own kernels), where it has one.
    autotune=False: on a GPU too a template takes its first config untimed (a run whose budget cannot pay for
    the search: autotune_budget.py)."""
    try:
        return _generate(definition, device, persistent_reductions, split_reductions, seed, native_matmul=False,
                         autotune=autotune)
    except InductorFailed as failure:
        from torch._inductor import config

        if "NoValidChoices" not in str(failure) or "triton.native_matmul" not in config.get_config_copy():
            raise
        return _generate(definition, device, persistent_reductions, split_reductions, seed, native_matmul=True,
                         autotune=autotune)


def _generate(definition: RegionDefinition, device: torch.device, persistent_reductions: bool, split_reductions: bool,
              seed: int, native_matmul: bool, autotune: bool) -> InductorOutput:
    from torch._inductor import config

    gm = region_module(definition, device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    made = make_inputs(definition, gen, device)
    args = [made[item.name] for item in definition.inputs]
    has_head = any(ops.kind(ops.resolve(node.op)) in ops.HEADS for node in definition.nodes)
    options = {"force_disable_caches": True, "max_autotune": has_head and not native_matmul,
               "max_autotune_gemm_backends": "TRITON", "max_autotune_conv_backends": "TRITON",
               "triton.native_matmul": native_matmul,
               "triton.persistent_reductions": persistent_reductions, "split_reductions": split_reductions,
               # the classic GEMM template: a persistent TMA one needs an allocator, decompose-k a second GEMM
               "triton.enable_persistent_tma_matmul": False, "triton.num_decompose_k_splits": 0,
               # timing each fused epilogue apart compiles one more module per candidate (and, on the CPU
               # backend, writes one that does not import): the template's own choice is kept
               "benchmark_epilogue_fusion": False}
    known = config.get_config_copy()
    options = {key: value for key, value in options.items() if key in known}     # torch releases differ
    codes: list[str] = []
    on_gpu = device.type == "cuda"
    torch._dynamo.reset()
    try:
        with config.patch(options), _capturing(codes, stop=not on_gpu), _precompile_threads(), \
                (contextlib.nullcontext() if on_gpu else _cpu_triton()), \
                (contextlib.nullcontext() if autotune or not on_gpu else _first_choice_only()), torch.no_grad():
            compiled = torch.compile(gm, fullgraph=True, dynamic=False)
            try:
                compiled(*args)
            except Exception as error:
                if not codes:
                    raise InductorFailed(f"Inductor failed: {failure_line(error)}") from None
        configs = _chosen_configs(codes[-1]) if on_gpu else {}
    finally:
        torch._dynamo.reset()
    import triton

    return InductorOutput(codes[-1], configs, "cuda" if on_gpu else "cpu",
                          f"torch {torch.__version__}, Triton {triton.__version__}")


def _chosen_configs(code: str) -> dict[str, dict]:
    """Each kernel's config as its autotuner kept it, from the loaded module Inductor ran."""
    import sys

    from torch._inductor.codecache import PyCodeCache

    loaded = list(getattr(PyCodeCache, "modules", [])) + list(sys.modules.values())     # torch releases differ
    module = next((m for m in reversed(loaded) if getattr(m, "__file__", None) and _source(m) == code), None)
    chosen = {}
    for name, value in (vars(module).items() if module is not None else ()):
        launchers = getattr(value, "launchers", None)
        if launchers:
            config = launchers[0].config
            chosen[name] = {**dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages}
    return chosen


def _source(module) -> str | None:
    """A Python module's source text; None for anything else. Extension modules (torch._C, Triton's compiled
    launchers) have a .so for __file__, which is no text: reading one as UTF-8 raised UnicodeDecodeError and cost
    the tanh-GELU region its starter on an H100 (benchmarks/results/2026-11-27_NVIDIA-H100_region_starters)."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str) or not file.endswith(".py"):
        return None
    try:
        with open(file, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, ValueError):          # ValueError: UnicodeDecodeError, a file that is not UTF-8 after all
        return None
