"""kernels/cuda/softmax.py: its Python side on CPU (the C++ entry point stood in for), its tunables against
CUDA_SOURCE's own constraints, its CUDA_SOURCE through nvcc for sm_90a where nvcc exists (both row layouts), and
on a GPU the judge's PASS and every row layout right on rows that reach each kernel, masked rows included.
(benchmarks/cuda_check.py compile's tests build each kernel any choice can launch without a spill.)"""

import importlib.util
import itertools
import re
from types import SimpleNamespace

import pytest
import torch

import reference
from autokernel.agents.tunables import rewrite_tunables
from autokernel.core.dtypes import TOLERANCES
from autokernel.judge import cuda_launches
from autokernel.kernel_types import registry
from cuda_starter_checks import (import_with, judge_crashes_without_a_gpu, judge_passes, needs_gpu, needs_nvcc,
                                 nvcc_compiles, search_can_tune, starter_path)

LITERALS = cuda_launches.file_literals(starter_path("softmax").read_text())


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
    assert all(starter.TUNABLES[name] in values for name, values in starter.TUNABLE_CHOICES.items())


def test_the_row_layouts_are_choices_and_the_defaults_are_the_ones_an_h100_measured_faster():
    assert LITERALS["TUNABLE_CHOICES"]["PACKED_ROW"] == [False, True]
    assert LITERALS["TUNABLE_CHOICES"]["LOCAL_MAX"] == [False, True]
    # benchmarks/results/2026-11-27_NVIDIA-H100_cuda_softmax/: 0.97 and 0.95 of copy, against 0.94 and 0.78.
    assert LITERALS["TUNABLES"]["PACKED_ROW"] is True and LITERALS["TUNABLES"]["LOCAL_MAX"] is True


def static_asserts(source: str) -> list[tuple[str, str]]:
    """(condition, message) of CUDA_SOURCE's static_asserts on the tunables alone, as Python expressions."""
    found = re.findall(r'static_assert\(([^;]*?),\s*"([^"]*)"\);', source)
    names = set(LITERALS["TUNABLES"]) | {"WARP"}
    python = [(condition.replace("&&", " and ").replace("||", " or "), message) for condition, message in found]
    return [(c, m) for c, m in python if set(re.findall(r"[A-Za-z_]\w*", c.replace(" and ", " ").replace(" or ", " ")))
            <= names]


def test_every_combination_the_search_can_reach_meets_the_source_s_static_asserts():
    # The built-in search moves one tunable at a time among its choices, so it can reach every combination.
    checks = static_asserts(LITERALS["CUDA_SOURCE"])
    assert {m for _, m in checks} >= {"BLOCK_THREADS must be a multiple of 32, from 32 to 1024",
                                      "MAX_PACKS must be a power of two"}
    choices = LITERALS["TUNABLE_CHOICES"]
    for values in itertools.product(*choices.values()):
        namespace = {**dict(zip(choices, values)), "WARP": 32}
        for condition, message in checks:
            assert eval(condition, {}, namespace), f"{namespace}: {message}"       # noqa: S307 (the file's own text)
    namespace = {**LITERALS["TUNABLES"], "WARP": 32, "MAX_PACKS": 12}
    assert not all(eval(condition, {}, namespace) for condition, _ in checks)      # noqa: S307


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


@pytest.mark.slow
@needs_nvcc
def test_cuda_source_compiles_for_sm90a(tmp_path):
    nvcc_compiles("softmax", tmp_path)


@pytest.mark.slow
@needs_nvcc
def test_floats_with_the_row_max_first_compile_for_sm90a(tmp_path):
    # The choices off (TUNABLES has both on): they change only the kernels, whose device code this builds.
    assert LITERALS["TUNABLES"]["PACKED_ROW"] and LITERALS["TUNABLES"]["LOCAL_MAX"]
    nvcc_compiles("softmax", tmp_path, {"PACKED_ROW": False, "LOCAL_MAX": False}, device_only=True)


def masked_rows(x: torch.Tensor) -> torch.Tensor:
    """x with row 0 all -inf (NaN out, as in PyTorch); row 1 -inf in every 16-byte piece of every third thread of a
    warp (whole threads' pieces -inf in a row with a finite max), or in every third entry where rows are not whole
    pieces; row 2 one +inf (NaN out); row 3 scaled to exp's range."""
    x = x.clone()
    x[0] = float("-inf")
    piece = 16 // x.element_size()
    if x.shape[1] % piece == 0:
        pieces = x[1].view(-1, piece)
        pieces[torch.arange(len(pieces), device=x.device) % 32 % 3 == 0] = float("-inf")
    else:
        x[1, ::3] = float("-inf")
    x[2, x.shape[1] // 2] = float("inf")
    x[3] *= 30
    return x


# Rows that reach each kernel with the default tunables: a warp's registers (2048; 1000: partly filled pieces), a
# block's registers (32768; 3000: threads holding nothing), the looping kernel (40000: too long; 1001: not 16-byte
# rows); and strided views, a wider tensor's first 2048 columns (rows 16-byte aligned, and not).
GPU_ROWS = [(5, 2048), (7, 1000), (4, 32768), (6, 3000), (4, 40000), (6, 1001)]


@needs_gpu
@pytest.mark.parametrize("packed, local", list(itertools.product([False, True], repeat=2)))
def test_every_row_layout_matches_pytorch_on_every_kernel(tmp_path, packed, local):
    source = rewrite_tunables(starter_path("softmax").read_text(),
                              {**LITERALS["TUNABLES"], "PACKED_ROW": packed, "LOCAL_MAX": local})
    (tmp_path / "softmax_variant.py").write_text(source)
    spec = importlib.util.spec_from_file_location("softmax_variant", tmp_path / "softmax_variant.py")
    variant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variant)
    gen = torch.Generator("cuda").manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        tolerance = TOLERANCES[dtype]
        cases = [masked_rows(torch.randn(m, n, generator=gen, device="cuda").to(dtype)) for m, n in GPU_ROWS]
        cases += [torch.randn(8, n, generator=gen, device="cuda").to(dtype)[:, :2048] for n in (2056, 2051)]
        for x in cases:
            expected = reference.softmax(x.float()).to(dtype)
            torch.testing.assert_close(variant.kernel_fn(x).float(), expected.float(), atol=tolerance, rtol=tolerance,
                                       equal_nan=True, msg=lambda m: f"{dtype} {tuple(x.shape)}: {m}")


@needs_gpu
def test_the_starter_passes_the_judge(tmp_path):
    judge_passes("softmax", tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the judge's answer on a machine without a GPU")
def test_without_a_gpu_the_judge_says_why(tmp_path):
    judge_crashes_without_a_gpu("softmax", tmp_path)


def test_the_builtin_search_can_tune_every_choice():
    search_can_tune("softmax")
