"""What a model's patched forwards cost under torch.compile + CUDA graphs, with nothing of ours doing any work.

    python benchmarks/end_to_end.py plugged-overhead [--only NAME ...] [--dtype float16] [--size full|tiny]
                                                     [--profile] [--no-plugged]

Why: in the gate of session 16 (benchmarks/results/2026-11-29_NVIDIA-H200_gate_s16/), verify's paired compiled
trial of batch-norm folding timed "PyTorch's own path" (the same compiled model, folding bypassed) at 0.769 ms on
MobileNetV3 where plain torch.compile + CUDA graphs took 0.516 ms, and 0.431 against 0.241 ms on KernelBench's
ResNet-18: the fold won its trial and lost the verdict. Each model here is timed, one variant at a time, in
torch.compile's "reduce-overhead" mode (whole call, host clock between syncs, median of 5 repeats and their range):
  plain     the model as it is;
  bypassed  its batch norms' forwards patched for folding, the fold bypassed (what the trial's own side runs);
  folded    the same patches, folded;
  paired    folded and bypassed through one compiled object, timed in turn as verify's trial times them;
  two objects  folded and bypassed compiled as two objects, timed in turn (as verify's verdict times its two
            bests, autokernel/verify/head_to_head.py: session 19, each as fast as alone);
  plugged   folded, with the model's starter kernels plugged in as verify runs AutoKernel's compiled variant
            (`m = autokernel.plug_in(model, starters); torch.compile(m, backend=autokernel.compile_backend(m,
            "reduce-overhead"))`), the "measured" policy with no route table: nothing routed, the router's own cost;
            and the same plugged-in model compiled by Inductor's own backend (mode="reduce-overhead").
If "bypassed" is much slower than "plain", the patches themselves cost (guards, Python in the traced forwards, a
second graph); if "paired" differs from the two timed alone, the pairing does; if "plugged" is slower than "folded",
plug_in's router does (session 17, H200: conv+bn+relu 0.177 ms against 0.121 ms compiled, the fold alone 0.093
against 0.083). The starters are made as verify makes them (the model profiled and planned, each kernel type's
starter at the plan's shapes), into a temporary folder. Without a GPU it runs on the CPU (no CUDA graphs: a check
that it runs, its times mean nothing).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import tempfile
import time
from pathlib import Path

import torch

from autokernel.routing import plugin
from autokernel.routing.bn_folding import fold_batch_norms, unfold_batch_norms
from autokernel.verify import head_to_head, latency
from benchmarks.common import ROOT

# name -> (zoo file, arch): the CNNs of the gate whose fold won its compiled trial in session 16
MODELS = {"kb: resnet18": ("cnn.py", "resnet18"), "kb: conv+bn+relu": ("cnn.py", "conv_bn_relu"),
          "mobilenet_v3_small": ("vision.py", "mobilenet_v3_small"), "resnet18": ("vision.py", "resnet18")}


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load(name: str, dtype: torch.dtype, size: str):
    file, arch = MODELS[name]
    spec = importlib.util.spec_from_file_location(f"zoo_{arch}", ROOT / "benchmarks" / "zoo" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # Dynamo imports a traced function's module by name (cnn.py's classes)
    spec.loader.exec_module(module)
    model = module.get_model(arch, size).eval().to(DEVICE, dtype)
    return model, tuple(x.to(DEVICE, dtype) for x in module.get_inputs(arch, size))


def guard_cost(model, inputs: tuple, compiled=None) -> str:
    """How many guards Dynamo checks before each call of the model's compiled forward, and how long that takes (the
    first cache entry's guards, host clock, best of 7): every patched forward adds guards on its closures. The entry
    is on the model's forward, or for a torch.nn container (nn.Sequential) on the frame torch.compile wraps it in."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    functions, fn = [type(model).forward], getattr(compiled, "forward", None)
    while fn is not None:          # the wrappers torch.compile put around the forward, to the frame Dynamo entered
        if hasattr(fn, "__code__"):
            functions.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    fn = next((fn for fn in functions if _debug_get_cache_entry_list(fn.__code__)), None)
    if fn is None:
        return "guards: no cache entry found"
    manager = _debug_get_cache_entry_list(fn.__code__)[0].guard_manager
    frame = _frame_of(fn, model, inputs)
    with torch.no_grad():
        if not manager.check(frame):
            return "guards: the first entry is not this call's"
        best = min(_seconds(lambda: manager.check(frame), 1000) for _ in range(7))
    lines = str(manager).splitlines()
    count = sum(1 for line in lines if "+- " in line)
    lambdas = sum(1 for line in lines if "LAMBDA_GUARD" in line)
    return f"guards: {best * 1e6:.1f} us a call ({count} lines, {lambdas} of them Python lambdas)"


def _frame_of(fn, model, inputs: tuple) -> dict:
    """The locals the guards read, for fn's frame entered with (model, *inputs): the model's forward (self, x), a
    patched forward (self, *args, **kwargs; its class in a cell), torch.compile's wrapper around a container (*args,
    **kwargs; the model in a cell)."""
    code, frame, rest = fn.__code__, {}, list(inputs)
    for name in code.co_varnames[:code.co_argcount]:
        frame[name] = model if name == "self" else rest.pop(0)
    extra = iter(code.co_varnames[code.co_argcount + code.co_kwonlyargcount:])
    if code.co_flags & inspect.CO_VARARGS:
        frame[next(extra)] = tuple(rest)
    if code.co_flags & inspect.CO_VARKEYWORDS:
        frame[next(extra)] = {}
    frame.update(zip(code.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))
    return frame


def _seconds(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def timed(fn, model, inputs: tuple, compiled=None) -> str:
    with torch.no_grad():
        for _ in range(3):          # compile, then CUDA graphs' warm-up and recording
            fn()
        t = latency.wall_clock(fn, DEVICE == "cuda")
    return f"{t.median_ms:.3f} ms [{t.low_ms:.3f}-{t.high_ms:.3f}]; {guard_cost(model, inputs, compiled)}"


def measure(name: str, dtype: torch.dtype, size: str, profile: bool = False, plugged: bool = True) -> list[str]:
    model, inputs = load(name, dtype, size)
    lines = []
    torch._dynamo.reset()
    plain = torch.compile(model, mode="reduce-overhead")
    lines.append(f"{name}: plain {timed(lambda: plain(*inputs), model, inputs, plain)}")
    if profile:
        lines += _profiled(lambda: plain(*inputs), f"{name}, plain")
    starters = _starters(model, inputs, name) if plugged else None       # profiled as verify does: unfolded
    bypass = [True]
    folding = fold_batch_norms(model, inputs, bypassed=lambda: bypass[0])
    for label, bypassed in (("bypassed", True), ("folded", False)):
        torch._dynamo.reset()
        bypass[0] = bypassed
        alone = torch.compile(model, mode="reduce-overhead")
        lines.append(f"{name}: {label} ({len(folding.folds)} folds) "
                     f"{timed(lambda: alone(*inputs), model, inputs, alone)}")
        if profile and not bypassed:
            lines += _profiled(lambda: alone(*inputs), f"{name}, folded alone")
    torch._dynamo.reset()
    both = torch.compile(model, mode="reduce-overhead")

    def side(bypassed: bool):
        def call():
            bypass[0] = bypassed
            return both(*inputs)
        return call
    with torch.no_grad():
        for _ in range(3):
            side(False)(), side(True)()
        ours, theirs = latency.paired(side(False), side(True), DEVICE == "cuda")
    lines.append(f"{name}: paired folded {ours.median_ms:.3f} ms, bypassed {theirs.median_ms:.3f} ms")
    with torch.no_grad():       # both states compiled and recorded, one of them called: the two entries, no switching
        one_side = latency.wall_clock(side(False), DEVICE == "cuda")
    lines.append(f"{name}: both compiled, folded alone {one_side.median_ms:.3f} ms")
    if profile:
        lines += _profiled(side(False), f"{name}, both compiled, folded")
    torch._dynamo.reset()
    # As verify's verdict times its two bests (autokernel/verify/head_to_head.py)
    folded_fn, bypassed_fn = (head_to_head.frame_of(model, "reduce-overhead", "inductor",
                                                    lambda state=state: bypass.__setitem__(0, state))
                              for state in (False, True))
    folded, bypassed = (lambda: folded_fn(*inputs)), (lambda: bypassed_fn(*inputs))
    with torch.no_grad():
        for _ in range(3):
            folded(), bypassed()
        ours, theirs = latency.paired(folded, bypassed, DEVICE == "cuda")
    lines.append(f"{name}: two objects in turn, folded {ours.median_ms:.3f} ms, bypassed {theirs.median_ms:.3f} ms")
    bypass[0] = False
    if starters is not None:
        lines += _plugged(name, model, inputs, folding, starters, profile)
    unfold_batch_norms(model)
    return lines


def _starters(model, inputs: tuple, name: str) -> Path:
    """The model's starter kernels, made as `verify --starters` makes them: profiled, planned, the starter of each of
    the plan's top kernel types at the plan's shapes (regions: Inductor's code for them), in a folder of their own."""
    from autokernel.profile import profiler
    from autokernel.verify.verification import STARTERS_TOP, write_starter_manifest

    workspace = Path(tempfile.mkdtemp(prefix="plugged_overhead_"))
    _, plan = profiler.profile_to_workspace(model, inputs, name=name, workspace=workspace)
    return write_starter_manifest(plan, workspace / "starter_kernels", top=STARTERS_TOP)


def _plugged(name: str, model, inputs: tuple, folding, starters: Path, profile: bool) -> list[str]:
    """The folded model with its starters plugged in, compiled as verify's "AutoKernel + torch.compile + CUDA graphs"
    variant (the fold wired to the router as verify wires it: bypassed with it, eager inside its eager trace)."""
    plugin.plug_in(model, starters)
    router = plugin.router_of(model)
    folding.bypassed = lambda: router.bypass
    folding.eager_trace = lambda: router.regions is not None and router.regions.tracing_eagerly
    try:
        with torch.no_grad():
            for _ in range(2):      # the routes resolved eagerly (with norms to fold the first call only watches)
                model(*inputs)
        kernels = ", ".join(kernel.name for kernel in router.kernels)
        lines = []
        # verify's backend, then Inductor's own in the same mode: where no region is replaced the two compile the
        # same graph, so a difference between them is the backend's wrapping, not the router's guards
        for how, backend in (("compile_backend", plugin.compile_backend(model, "reduce-overhead")), ("inductor", None)):
            torch._dynamo.reset()
            ours = (torch.compile(model, backend=backend) if backend is not None
                    else torch.compile(model, mode="reduce-overhead"))
            lines.append(f"{name}: plugged, {how} ({kernels}; folded) "
                         f"{timed(lambda: ours(*inputs), model, inputs, ours)}")
            if profile:
                lines += _profiled(lambda: ours(*inputs), f"{name}, plugged, {how}")
        return lines
    finally:
        torch._dynamo.reset()
        plugin.unplug(model)


def _profiled(call, label: str, calls: int = 200) -> list[str]:
    """Where the host's time goes in `calls` calls (cProfile, top functions by own time): the Python of a call."""
    import cProfile
    import io
    import pstats
    with torch.no_grad():
        call()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            call()
        torch.cuda.synchronize() if DEVICE == "cuda" else None
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
    return [f"--- {label}: cProfile of {calls} calls", *out.getvalue().splitlines()]


def main(args: argparse.Namespace) -> int:
    if DEVICE == "cpu":
        print("no GPU: on the CPU, without CUDA graphs; these times mean nothing")
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if DEVICE == 'cuda' else 'CPU'}, {args.dtype}")
    for name in args.only or list(MODELS):
        for line in measure(name, dtype, args.size, args.profile, not args.no_plugged):
            print(line, flush=True)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", nargs="*", choices=list(MODELS))
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--profile", action="store_true", help="print where the host's time goes (cProfile) in the "
                        "plain model, the folded model alone, the compiled object holding both states, and plugged in")
    parser.add_argument("--no-plugged", action="store_true", help="skip the plugged-in variant (and making starters)")
