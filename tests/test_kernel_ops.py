"""Tests for autokernel/kernel_ops.py: which kernels a file launches, and the ops torch.compile traces."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from autokernel import kernel_ops, plugin  # noqa: E402
from autokernel.paths import starter_path  # noqa: E402
from tests.test_plugin import reference_sources, write_optimized  # noqa: E402


def test_launched_kernels_are_the_ones_called_with_a_grid_from_python():
    source = starter_path("rmsnorm").read_text()
    # _rmsnorm_rows and _rmsnorm_channels are launched; _load_weight and _scale_and_store are called from Triton code only,
    # and wrapping those would break the kernels that call them.
    assert kernel_ops.launched_kernels(source) == {"_rmsnorm_rows", "_rmsnorm_channels"}
    assert "_gemm_tma_kernel" in kernel_ops.launched_kernels(starter_path("fused_mlp").read_text())


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
