"""Routes regions in a plugged-in model: wherever the model computes a region a kernel was kept for, the kernel runs.

A region is a piece of the model's ATen graph, not a module or a torch function, so it is routed in
the graph: the model's forward is captured by torch.compile's front end (Dynamo) and traced into
ATen ops as the profiler traced it (capture.aten_graph), each region with a loaded kernel is found
in it (matching.find) and, where the decision says so, replaced by the kernel (matching.replace):
  - eagerly (`run_model`, the patched forward): the rewritten ATen graph runs op by op, the region's
    kernel_fn called directly, as PyTorch eager would run the ops it did not replace. A model's first
    call with a new input signature runs as it is, eagerly, so that the menu's routes are resolved
    (autokernel/routing/router.py); from the second on it runs through the rewritten graph;
  - under torch.compile (`compile_backend`): the same rewrite, the kernel as its graph op (a Triton
    op Inductor sees into, autokernel/routing/kernel_ops.py), then Inductor compiles the rest around it.
A decision is per region and per mode, as the menu's are per call signature: under the "measured"
policy a region is replaced only where its route table says the kernel beat PyTorch there, eagerly
or compiled (autokernel/verify/route_table.py measures it at the site this notes); under "all", wherever
it is found. A region's one signature is the model's call: the kernel was judged at exactly it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

import torch

from autokernel.core.dtypes import DTYPES
from autokernel.kernel_types import registry
from autokernel.kernel_types.regions import store
from autokernel.kernel_types.regions.capture import aten_graph
from autokernel.kernel_types.regions.graph import torch_dtype
from autokernel.routing.decisions import ALL, Site, call_signature
from autokernel.routing.regions import matching

EAGER, COMPILED = "eager", "compiled"


def _overload(op):
    return getattr(op, "_opoverload", op)


class RegionRouting:
    """The region kernels of one plugged-in model, where its graphs compute them, and what they replaced."""

    def __init__(self, router, kernels: list):
        self.router = router
        self.kernels = [kernel for kernel in kernels if store.is_region(kernel.kernel_type)]
        self.definitions = {k.kernel_type: store.load(k.kernel_type).definition for k in self.kernels}
        self._eager: dict = {}
        self._resolved: Counter = Counter()          # input signature -> eager calls made
        self._eager_routes: bool | None = None
        self._found: dict[str, Counter] = {}           # graph code -> matches per kernel (a graph seen twice counts once)
        self.replaced: Counter = Counter()             # kernel name -> regions replaced in the graphs compiled so far
        # The eager forward traced by Dynamo now (not a compiled variant): a rewrite that decides per mode reads it
        # (autokernel/routing/bn_folding.py); Dynamo guards on it, so each of the two ways in keeps its own graph.
        self.tracing_eagerly = False

    # ------------------------------------------------------------------ deciding and rewriting
    def routes(self, kernel, mode: str) -> bool:
        if self.router.policy == ALL:
            return True
        definition = self.definitions[kernel.kernel_type]
        record = kernel.record(kernel.shapes[0], DTYPES[definition.dtype]) if kernel.shapes else None
        return bool(record is not None and (record.route_eager if mode == EAGER else record.route_compiled))

    def rewrite(self, gm: torch.fx.GraphModule, example_inputs, mode: str) -> tuple[torch.fx.GraphModule, Counter]:
        """The graph in ATen ops with the routed regions replaced (mode: EAGER calls kernel_fn, COMPILED the op)."""
        aten = aten_graph(gm, example_inputs, fake=False)
        graph_key = aten.code                  # before any rewrite: the eager and the compiled capture alike
        found, replaced = Counter(), Counter()
        for kernel in self.kernels:
            definition = self.definitions[kernel.kernel_type]
            matches = matching.find(aten.graph, definition)
            found[kernel.name] = len(matches)
            if matches:
                self._note_site(kernel, definition)
            if not matches or not self.routes(kernel, mode):
                continue
            # eagerly kernel_fn itself; compiled its op (a custom op's OpOverload is what an FX graph calls)
            run = kernel.kernel_fn if mode == EAGER else _overload(kernel.graph_op(self._example(kernel)))
            matching.replace(aten, matches, run, len(definition.outputs))
            replaced[kernel.name] += len(matches)
        if replaced:
            aten = matching.finish(aten)
        self._found[graph_key] = found
        for site in self.router.sites.values():
            if site.kernel.name in found:
                site.calls = sum(counts[site.kernel.name] for counts in self._found.values())
        self.replaced.update(replaced)
        return aten, replaced

    def _example(self, kernel) -> tuple:
        """Inputs drawn at the region's signature, on the device the model runs on (the GPU, where there is one)."""
        kt = registry.get(kernel.kernel_type)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        inputs = kt.inputs(kernel.shapes[0], DTYPES[self.definitions[kernel.kernel_type].dtype], 0, device)
        return tuple(inputs[item.name] for item in self.definitions[kernel.kernel_type].inputs)

    @staticmethod
    def _example_fits(definition) -> bool:
        """Whether drawn inputs for timing the region fit in the GPU memory left (always on a CPU)."""
        if not torch.cuda.is_available():
            return True
        needed = sum(math.prod(i.shape) * torch_dtype(i.dtype).itemsize for i in definition.inputs)
        return 3 * needed < torch.cuda.mem_get_info()[0]

    def _note_site(self, kernel, definition) -> None:
        """A site for verify's route table: the kernel and PyTorch's region on inputs drawn at its signature."""
        dtype = DTYPES[definition.dtype]
        key = (kernel.name, registry.format_shape(kernel.shapes[0]), dtype)
        if key in self.router.sites:
            return
        region = store.load(kernel.kernel_type)
        site = Site(kernel, dict(kernel.shapes[0]), dtype, f"region {' -> '.join(region.ops())}")
        if self.router.keep_examples and self._example_fits(definition):
            example = self._example(kernel)
            names = [item.name for item in definition.inputs]
            reference = registry.get(kernel.kernel_type).reference
            site.run_ours = site.run_routed = lambda: kernel.kernel_fn(*example)
            site.run_pytorch = lambda: reference(**dict(zip(names, example)))
        self.router.sites[key] = site

    # ------------------------------------------------------------------ the two ways in
    def eager_backend(self, gm: torch.fx.GraphModule, example_inputs) -> Callable:
        aten, replaced = self.rewrite(gm, example_inputs, EAGER)
        calls = replaced + self._menu_calls(aten)

        def run(*args):
            for name, count in calls.items():          # the menu's kernels run as their ops here: counted here
                self.router.stats[name].hits += count
            return aten(*args)
        return run

    def _menu_calls(self, aten: torch.fx.GraphModule) -> Counter:
        """The menu's kernels the graph calls as their ops (autokernel/routing/kernel_ops.py names them by op_name)."""
        names = {kernel.op_name: kernel.name for kernel in self.router.kernels if kernel not in self.kernels}
        calls = Counter()
        for node in aten.graph.nodes:
            if node.op == "call_function":
                target = str(node.target)
                calls.update(name for op_name, name in names.items() if op_name in target)
        return calls

    def compile_backend(self, mode: str = "default") -> Callable:
        """A torch.compile backend: the routed regions replaced, then Inductor (in this torch.compile mode)."""
        def backend(gm: torch.fx.GraphModule, example_inputs):
            from torch._inductor import list_mode_options
            from torch._inductor.compile_fx import compile_fx

            # Bypassed (verify times PyTorch's own compiled path beside ours), or no region replaced (a kernel's route
            # timed alone): Dynamo's own graph, as Inductor gets it without us, not make_fx's second tracing of it,
            # which can only differ from it (its input marks had to be restored by hand: keep_dynamo_inputs).
            graph = gm
            if not self.router.bypass:
                rewritten, replaced = self.rewrite(gm, example_inputs, COMPILED)
                graph = keep_dynamo_inputs(rewritten, gm) if replaced else gm
            return compile_fx(graph, example_inputs, config_patches=list_mode_options(mode))
        return backend

    def run_model(self, original: Callable, args: tuple, kwargs: dict):
        """The model's forward, patched: eagerly through the rewritten graph (see the module's docstring)."""
        # The bypass is read first: Dynamo guards on what it reads, so a forward compiled with the regions replaced
        # is compiled again, without them, when the router is bypassed (else both sides of a paired timing are ours).
        if self.router.bypass or torch.compiler.is_compiling():
            return original(*args, **kwargs)
        try:
            key = call_signature(args, kwargs)
        except TypeError:
            return original(*args, **kwargs)
        # The first call resolves the menu's routes eagerly (with norms to fold, the first two: the first only
        # watches), as the model is; later ones run through the rewritten graph where a region routes eagerly.
        if self._resolved[key] < (2 if self.router.folding is not None else 1) or not self._any_eager():
            self._resolved[key] += 1
            return original(*args, **kwargs)
        compiled = self._eager.get(original)
        if compiled is None:
            compiled = self._eager[original] = torch.compile(original, backend=self.eager_backend, dynamic=False)
        self.tracing_eagerly = True
        try:
            return compiled(*args, **kwargs)
        finally:
            self.tracing_eagerly = False

    def routes_compiled(self) -> bool:
        """Whether any region is replaced in a compiled graph. Without one, this forward's run, which under
        torch.compile only reads the bypass (so that a bypassed forward is compiled again, without the regions), need
        not be traced: the backend compiles Dynamo's own graph either way (autokernel/routing/router.py retraces)."""
        return any(self.routes(kernel, COMPILED) for kernel in self.kernels)

    def _any_eager(self) -> bool:
        """Whether any region routes eagerly: without one, the model runs as the menu routes it, not through Dynamo."""
        if self._eager_routes is None:
            self._eager_routes = any(self.routes(kernel, EAGER) for kernel in self.kernels)
        return self._eager_routes

    def forget(self) -> None:
        """Decisions changed: the rewritten graphs are made again on the next calls."""
        self._eager_routes = None
        if self._eager:
            torch._dynamo.reset()
        self._eager.clear()
        self._resolved.clear()
        self._found.clear()

    def summary(self) -> list[dict]:
        return [{"name": k.name, "region": k.kernel_type, "ops": store.load(k.kernel_type).ops(),
                 "found": sum(c[k.name] for c in self._found.values()), "replaced": self.replaced[k.name]}
                for k in self.kernels]


def keep_dynamo_inputs(aten: torch.fx.GraphModule, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The rewritten graph carrying what Dynamo said of its inputs, so that Inductor knows them as Dynamo's graph.

    AOTAutograd reads which inputs are static (the model's parameters and buffers: the same memory on every call)
    from Dynamo's marks on the graph module and its placeholders. The rewritten graph, traced again by make_fx, had
    none, so under CUDA graphs every parameter counted as a new input and was copied into the graph's own buffers
    before every replay: on an H200, routing one 5 us region of a 4-layer GPT-2 made its compiled forward 2.2x
    slower (1.39 ms against 0.63). Each placeholder of the rewritten graph is the same input as Dynamo's at its
    position; a constant make_fx lifted (a buffer of the rewritten graph) is static too. Where the inputs do not
    line up, the graph goes on unmarked: correct, only slower under CUDA graphs.
    """
    from torch._dynamo.source import ConstantSource

    ours, theirs = aten.graph.find_nodes(op="placeholder"), gm.graph.find_nodes(op="placeholder")
    if "dynamo_compile_id" not in gm.meta or len(ours) != len(theirs) or not hasattr(gm, "_param_name_to_source"):
        return aten
    for mine, dynamos in zip(ours, theirs):
        mine._dynamo_source = getattr(dynamos, "_dynamo_source", None)
        if "tensor_dict" in dynamos.meta:
            mine.meta["tensor_dict"] = dynamos.meta["tensor_dict"]
    aten.meta["dynamo_compile_id"] = gm.meta["dynamo_compile_id"]
    lifted = [name for name, _ in aten.named_parameters(remove_duplicate=False)]
    lifted += [name for name, _ in aten.named_buffers(remove_duplicate=False)]
    aten._param_name_to_source = {name: ConstantSource(f"autokernel_rewrite_{name}") for name in lifted}
    return aten
