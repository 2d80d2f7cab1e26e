"""kernels/cuda/rmsnorm.py: its Python side on CPU (the C++ entry points stood in for), its CUDA_SOURCE
through nvcc for sm_90a where nvcc exists, and the judge's PASS on a GPU."""

from types import SimpleNamespace

import pytest
import torch

import reference
from autokernel.kernel_types import norms, registry
from cuda_starter_checks import (import_with, judge_crashes_without_a_gpu, judge_passes, needs_gpu, needs_nvcc,
                                 nvcc_compiles, search_can_tune)


def rmsnorm_rows(x, weight, eps):
    # The C++ entry points' checks (TORCH_CHECK in CUDA_SOURCE), then their result.
    assert x.dim() == 2 and x.stride(1) == 1 and weight.is_contiguous() and weight.dtype == x.dtype
    return reference.rmsnorm(x, weight, eps)


def rmsnorm_channels(x, weight, eps):
    assert x.dim() == 3 and x.is_contiguous() and weight.is_contiguous() and weight.dtype == x.dtype
    return reference.rmsnorm(x, weight, eps, dim=1)


@pytest.fixture
def starter(monkeypatch):
    extension = SimpleNamespace(rmsnorm_rows=rmsnorm_rows, rmsnorm_channels=rmsnorm_channels)
    return import_with("rmsnorm", extension, monkeypatch)


def test_the_file_declares_the_cuda_backend(starter):
    assert starter.BACKEND == "cuda" and starter.KERNEL_TYPE == "rmsnorm"
    assert set(starter.TUNABLE_CHOICES) == set(starter.TUNABLES)


@pytest.mark.parametrize("shape", registry.get("rmsnorm").cpu_sweep + registry.get("rmsnorm").cpu_edge_shapes,
                         ids=registry.format_shape)
def test_both_forms_reach_their_entry_point(starter, shape):
    gen = torch.Generator().manual_seed(0)
    inputs = registry.get("rmsnorm").make_inputs(shape, torch.float32, gen, "cpu")
    assert inputs["x"].shape == norms.x_shape(shape)
    torch.testing.assert_close(starter.kernel_fn(**inputs), reference.rmsnorm(**inputs))


def test_dim_one_of_a_4d_tensor_and_bad_arguments(starter):
    x, weight = torch.randn(2, 5, 3, 4), torch.randn(5)
    torch.testing.assert_close(starter.kernel_fn(x, weight, 1e-6, 1), reference.rmsnorm(x, weight, 1e-6, 1))
    with pytest.raises(ValueError, match="matching weight"):
        starter.kernel_fn(x, torch.randn(4), 1e-6, 1)
    with pytest.raises(ValueError, match="cannot normalize"):
        starter.kernel_fn(x, weight, 1e-6, 4)


@pytest.mark.slow
@needs_nvcc
def test_cuda_source_compiles_for_sm90a(tmp_path):
    nvcc_compiles("rmsnorm", tmp_path)


@needs_gpu
def test_the_starter_passes_the_judge(tmp_path):
    judge_passes("rmsnorm", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the judge's answer on a machine without a GPU")
def test_without_a_gpu_the_judge_says_why(tmp_path):
    judge_crashes_without_a_gpu("rmsnorm", tmp_path)


def test_the_builtin_search_can_tune_every_choice():
    search_can_tune("rmsnorm")
