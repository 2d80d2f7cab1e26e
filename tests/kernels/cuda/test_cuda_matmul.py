"""kernels/cuda/matmul.py: its Python side on CPU (the C++ entry point stood in for, with its alignment
checks), its CUDA_SOURCE through nvcc for sm_90a where nvcc exists, and the judge's PASS on a GPU."""

from types import SimpleNamespace

import pytest
import torch

import reference
from autokernel.kernel_types import registry
from cuda_starter_checks import (import_with, judge_crashes_without_a_gpu, judge_passes, needs_gpu, needs_nvcc,
                                 nvcc_compiles, search_can_tune)

SEEN = []


def rows_aligned(t):
    # The C++ rows_aligned(): contiguous rows starting 16-byte aligned (cp.async's and float4's need).
    return t.stride(1) == 1 and t.stride(0) % (16 // t.element_size()) == 0 and t.data_ptr() % 16 == 0


def gemm(a, b):
    # The C++ entry point's checks (TORCH_CHECK in CUDA_SOURCE), then its result.
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] and a.dtype == b.dtype
    assert rows_aligned(a) and rows_aligned(b), "gemm: a and b need contiguous rows that start 16-byte aligned"
    SEEN.append((a, b))
    return (a.float() @ b.float()).to(a.dtype)


@pytest.fixture
def starter(monkeypatch):
    SEEN.clear()
    return import_with("matmul", SimpleNamespace(gemm=gemm), monkeypatch)


def test_on_an_sm90_gpu_the_build_targets_sm90a(monkeypatch):
    from autokernel.judge import cuda_build

    monkeypatch.setattr(cuda_build, "sm90a_flags", lambda: list(cuda_build.SM90A_FLAGS))
    asked = {}
    import_with("matmul", SimpleNamespace(gemm=gemm), monkeypatch, asked)
    assert asked["flags"] == list(cuda_build.SM90A_FLAGS)
    monkeypatch.setattr(cuda_build, "sm90a_flags", lambda: [])
    import_with("matmul", SimpleNamespace(gemm=gemm), monkeypatch, asked)
    assert asked["flags"] == []


def test_the_file_declares_the_cuda_backend(starter):
    assert starter.BACKEND == "cuda" and starter.KERNEL_TYPE == "matmul"
    assert set(starter.TUNABLE_CHOICES) == set(starter.TUNABLES)
    assert all(starter.TUNABLES[name] in choices for name, choices in starter.TUNABLE_CHOICES.items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", registry.get("matmul").cpu_sweep + registry.get("matmul").cpu_edge_shapes,
                         ids=registry.format_shape)
def test_every_shape_reaches_the_entry_point_with_aligned_rows(starter, shape, dtype):
    inputs = registry.get("matmul").make_inputs(shape, dtype, torch.Generator().manual_seed(0), "cpu")
    out = starter.kernel_fn(**inputs)
    assert out.shape == (shape["M"], shape["N"]) and out.dtype == dtype
    torch.testing.assert_close(out.float(), reference.matmul(inputs["a"].float(), inputs["b"].float()),
                               rtol=2e-2, atol=2e-2)


def test_aligned_operands_go_as_they_are_and_others_are_copied_to_padded_rows(starter):
    a, b = torch.randn(48, 64), torch.randn(64, 40)
    starter.kernel_fn(a, b)
    assert SEEN[-1][0].data_ptr() == a.data_ptr() and SEEN[-1][1].data_ptr() == b.data_ptr()
    # A transposed view, a row step of 2949 floats (not 16 bytes), and a start 4 bytes past alignment.
    transposed = torch.randn(64, 48).t()
    odd_rows = torch.randn(64, 2949)[:, :40]
    offset = torch.randn(48 * 64 + 1)[1:].view(48, 64)
    for x, y in [(transposed, b), (a, odd_rows), (offset, b)]:
        torch.testing.assert_close(starter.kernel_fn(x, y), x @ y, rtol=1e-4, atol=1e-4)
        sent_a, sent_b = SEEN[-1]
        assert rows_aligned(sent_a) and rows_aligned(sent_b)
        assert torch.equal(sent_a, x) and torch.equal(sent_b, y)
    assert SEEN[-1][0].data_ptr() != offset.data_ptr()


def test_empty_outputs_and_bad_arguments(starter):
    assert starter.kernel_fn(torch.randn(0, 8), torch.randn(8, 5)).shape == (0, 5)
    assert not SEEN                                   # nothing to compute: no launch
    with pytest.raises(ValueError, match="inner sizes differ"):
        starter.kernel_fn(torch.randn(4, 8), torch.randn(7, 5))
    with pytest.raises(TypeError, match="share one dtype"):
        starter.kernel_fn(torch.randn(4, 8), torch.randn(8, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D"):
        starter.kernel_fn(torch.randn(2, 4, 8), torch.randn(8, 5))


@pytest.mark.slow
@needs_nvcc
def test_cuda_source_compiles_for_sm90a(tmp_path):
    nvcc_compiles("matmul", tmp_path)


@needs_gpu
def test_the_starter_passes_the_judge(tmp_path):
    judge_passes("matmul", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the judge's answer on a machine without a GPU")
def test_without_a_gpu_the_judge_says_why(tmp_path):
    judge_crashes_without_a_gpu("matmul", tmp_path)


def test_the_builtin_search_can_tune_every_choice():
    search_can_tune("matmul")
