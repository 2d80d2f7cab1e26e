"""kernels/cuda/softmax.py: its Python side on CPU (the C++ entry point stood in for), its CUDA_SOURCE
through nvcc for sm_90a where nvcc exists, and the judge's PASS on a GPU."""

from types import SimpleNamespace

import pytest
import torch

import reference
from autokernel import registry
from cuda_starter_checks import (import_with, judge_crashes_without_a_gpu, judge_passes, needs_gpu, needs_nvcc,
                                 nvcc_compiles, search_can_tune)


def softmax_rows(x):
    # The C++ entry point's checks (TORCH_CHECK in CUDA_SOURCE), then its result.
    assert x.dim() == 2 and x.stride(1) == 1
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


@pytest.fixture
def starter(monkeypatch):
    return import_with("softmax", SimpleNamespace(softmax_rows=softmax_rows), monkeypatch)


def test_the_file_declares_the_cuda_backend(starter):
    assert starter.BACKEND == "cuda" and starter.KERNEL_TYPE == "softmax"
    assert set(starter.TUNABLE_CHOICES) == set(starter.TUNABLES)


@pytest.mark.parametrize("shape", registry.get("softmax").cpu_sweep + registry.get("softmax").cpu_edge_shapes,
                         ids=registry.format_shape)
def test_rows_of_any_shape_reach_the_entry_point_as_2d_rows(starter, shape):
    x = torch.randn(shape["M"], shape["N"])
    torch.testing.assert_close(starter.kernel_fn(x), reference.softmax(x))


def test_strided_empty_and_batched_inputs(starter):
    x = torch.randn(4, 6, 10)
    torch.testing.assert_close(starter.kernel_fn(x), reference.softmax(x))
    strided = torch.randn(10, 8).t()
    torch.testing.assert_close(starter.kernel_fn(strided), reference.softmax(strided))
    assert starter.kernel_fn(torch.empty(0, 5)).shape == (0, 5)


@needs_nvcc
def test_cuda_source_compiles_for_sm90a(tmp_path):
    nvcc_compiles("softmax", tmp_path)


@needs_gpu
def test_the_starter_passes_the_judge(tmp_path):
    judge_passes("softmax", tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the judge's answer on a machine without a GPU")
def test_without_a_gpu_the_judge_says_why(tmp_path):
    judge_crashes_without_a_gpu("softmax", tmp_path)


def test_the_builtin_search_can_tune_every_choice():
    search_can_tune("softmax")
