"""Tests for autokernel/routing/kernel_ops.py: which kernels a file launches, and the ops torch.compile traces."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from autokernel.core.paths import starter_path  # noqa: E402
from autokernel.routing import kernel_ops, plugin  # noqa: E402
from tests.plugin_helpers import write_optimized  # noqa: E402
from tests.test_plugin import reference_sources  # noqa: E402


def test_launched_kernels_are_the_ones_called_with_a_grid_from_python():
    source = starter_path("rmsnorm").read_text()
    # _rmsnorm_rows and _rmsnorm_channels are launched; _load_weight and _scale_and_store are called from Triton code only,
    # and wrapping those would break the kernels that call them.
    assert kernel_ops.launched_kernels(source) == {"_rmsnorm_rows", "_rmsnorm_channels"}
    assert "_engine_kernel" in kernel_ops.launched_kernels(starter_path("fused_mlp").read_text())


def test_an_op_that_reads_data_pointers_is_found_before_torch_compile_meets_it():
    @torch.library.custom_op("autokernel_test::doubles", mutates_args=())
    def doubles(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @torch.library.custom_op("autokernel_test::reads_pointer", mutates_args=())
    def reads_pointer(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    doubles.register_fake(lambda x: torch.empty_like(x))

    def pointer_fake(x):
        x.data_ptr()          # what a TMA descriptor or an alignment check does
        return torch.empty_like(x)
    reads_pointer.register_fake(pointer_fake)
    x = torch.randn(4)
    assert kernel_ops._fails_on_fake_tensors(doubles, (x,)) == ""
    assert "Cannot access data pointer" in kernel_ops._fails_on_fake_tensors(reads_pointer, (x,))


def test_without_a_gpu_the_graph_op_is_the_opaque_custom_op_with_the_reference_schema(tmp_path):
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 8}]}, sources=reference_sources("softmax"))
    (kernel,) = plugin.load_kernels(folder)
    op = kernel.graph_op((torch.randn(4, 8),))
    assert kernel.op_kind == "custom_op (the CPU interpreter's kernels cannot be traced)"
    assert str(op._opoverload._schema) == f"autokernel::{kernel.op_name}(Tensor x) -> Tensor"
    assert kernel.graph_op() is op       # chosen once
    kernel.use_opaque_op("its Triton op failed")
    assert kernel.op_kind == "custom_op (its Triton op failed)"


CUDA_SOFTMAX = '''
import torch
from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "softmax"
BACKEND = "cuda"
TUNABLES = {"BLOCK": 256}
TUNABLE_CHOICES = {"BLOCK": [128, 256]}
CUDA_SOURCE = r"""
__global__ void rows_kernel(const float* x, float* y) {}
torch::Tensor softmax_rows(torch::Tensor x) { return x; }
"""
_ext = load_cuda(CUDA_SOURCE, ["softmax_rows"], TUNABLES)
CALLS = []


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    CALLS.append(tuple(x.shape))
    return _ext.softmax_rows(x)
'''


def test_a_cuda_kernel_file_is_an_opaque_custom_op_with_a_fake_and_routes_like_a_triton_one(tmp_path, monkeypatch):
    """A CUDA C++ kernel file (its build faked: CI has no nvcc) loads from optimized_kernels/ like a Triton
    one, becomes a custom op with the reference's schema and fake, never a Triton op (even where torch has
    a GPU), traces on fake tensors, and the router sends the model's calls at its verified shapes to it."""
    from types import SimpleNamespace

    from torch.fx.experimental.proxy_tensor import make_fx

    from autokernel.judge import cuda_build

    monkeypatch.setattr(cuda_build, "load_cuda", lambda source, functions, tunables=None, **kw: SimpleNamespace(
        softmax_rows=lambda x: torch.softmax(x, dim=-1)))
    monkeypatch.setattr(kernel_ops, "_triton_op", lambda *a: (_ for _ in ()).throw(AssertionError("tried triton_op")))
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 8}]}, sources={"softmax": CUDA_SOFTMAX})
    (kernel,) = plugin.load_kernels(folder)
    assert kernel.backend == "cuda"
    x = torch.randn(4, 8)
    op = kernel.graph_op((x,))
    assert kernel.op_kind == "custom_op (a CUDA C++ kernel: Inductor cannot trace into it)"
    assert str(op._opoverload._schema) == f"autokernel::{kernel.op_name}(Tensor x) -> Tensor"
    traced = make_fx(lambda t: op(t), tracing_mode="fake")(x)      # the fake (the reference) gives the shape
    assert any(str(node.target).startswith(f"autokernel.{kernel.op_name}") for node in traced.graph.nodes)
    torch.testing.assert_close(op(x), torch.softmax(x, dim=-1))
    calls = kernel.kernel_fn.__globals__["CALLS"]
    calls.clear()

    class Model(torch.nn.Module):
        def forward(self, t):
            return torch.softmax(t, dim=-1)

    model = Model()
    plugin.plug_in(model, folder, policy="all")
    torch.testing.assert_close(model(x), torch.softmax(x, dim=-1))
    assert calls and set(calls) == {(4, 8)}      # the verified shape went to the CUDA kernel (checked first) ...
    seen = len(calls)
    model(torch.randn(3, 5))
    assert len(calls) == seen                     # ... another shape stayed with PyTorch


def _copy_through(use_descriptor: bool, monkeypatch):
    """A Triton op whose one kernel copies a 16x16 tile, reading it through a host-side TMA descriptor or a pointer.

    Its kernels are compiled ones, as on a GPU, not the interpreter's: these are traced, never run, and the
    interpreter would run them on the fake tensors."""
    import triton
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor

    monkeypatch.setattr(triton.knobs.runtime, "interpret", False)

    @triton.jit
    def _tile_from_descriptor(desc, out_ptr, B: tl.constexpr):
        tile = desc.load([0, 0])
        tl.store(out_ptr + tl.arange(0, B)[:, None] * B + tl.arange(0, B)[None, :], tile)

    @triton.jit
    def _tile_from_pointer(x_ptr, out_ptr, B: tl.constexpr):
        offsets = tl.arange(0, B)[:, None] * B + tl.arange(0, B)[None, :]
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))

    name = "tile_from_descriptor" if use_descriptor else "tile_from_pointer"

    @torch.library.triton_op(f"autokernel_test::{name}", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        if use_descriptor:
            torch.library.wrap_triton(_tile_from_descriptor)[(1,)](TensorDescriptor.from_tensor(x, [16, 16]), out, 16)
        else:
            torch.library.wrap_triton(_tile_from_pointer)[(1,)](x, out, 16)
        return out
    return op


def test_a_kernel_given_a_host_side_tma_descriptor_is_found_before_inductor_fails_on_it(monkeypatch):
    # Inductor (torch 2.11) failed on such a kernel while compiling the whole model, with "tolist() shouldn't be
    # called on a tensor with unallocated storage", and every Triton op of the model fell back to an opaque op.
    x = torch.randn(16, 16)
    why = kernel_ops._fails_on_fake_tensors(_copy_through(True, monkeypatch), (x,))
    assert "_tile_from_descriptor takes desc as a TensorDescriptor" in why
    assert kernel_ops._fails_on_fake_tensors(_copy_through(False, monkeypatch), (x,)) == ""
