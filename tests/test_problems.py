"""Every problem file of benchmarks/problems is planned: `autokernel score` finds at least one kernel job in each, a menu
type or a region of its graph (issue 25: "not planned" on none). Checked at small sizes: each problem's size constants
divided by 16 (the number of heads kept), which changes the shapes, not which ops run."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from autokernel.core.paths import ROOT
from autokernel.kernel_types.regions import store
from autokernel.profile import profiler
from autokernel.score import problem_files

FOLDER = ROOT / "benchmarks" / "problems"
KEPT = {"HEADS"}                   # an embedding must stay divisible by its heads
# The problems added for issue 25 (the menu covers none of them whole): each must hold a region.
NEW = {"gelu", "tanh_gelu_in_ops", "mish", "softsign_in_ops", "swish_scaled", "log_softmax", "l2_norm", "l1_norm",
       "frobenius_norm", "hinge_loss", "mse_loss", "kl_div_loss", "cosine_similarity_loss", "gemm_sigmoid_rowsum",
       "gemm_sigmoid_sum_logsumexp", "gemm_gelu_scale", "gemm_relu_rowmax", "cumsum_rows", "argmax_middle",
       "multihead_attention", "vit_block", "matrix_vector"}
MENU_ONLY = {"matrix_vector"}      # a lone GEMM: the menu's matmul (a matrix-vector product is one)
# Issue 34's convolutions and pooling, "not planned" before: each is a region, the convolution at its head.
CONVOLUTIONAL = {"conv2d_standard", "depthwise_conv2d", "depthwise_conv2d_strided", "max_pool2d", "conv2d_bn_relu"}


def small_problem(path):
    spec = importlib.util.spec_from_file_location(f"problem_small_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for name, value in list(vars(module).items()):
        if name.isupper() and isinstance(value, int) and name not in KEPT:
            setattr(module, name, max(2, value // 16))
    torch.manual_seed(0)
    return module.Model(*module.get_init_inputs()).eval(), tuple(module.get_inputs())


def test_the_folder_has_the_new_problems():
    assert NEW | CONVOLUTIONAL <= {path.stem for path in problem_files(FOLDER)} and len(NEW) >= 15


@pytest.mark.parametrize("path", problem_files(FOLDER), ids=lambda path: path.stem)
def test_every_problem_is_planned(path, tmp_path):
    model, inputs = small_problem(path)
    with torch.no_grad():
        _, plan = profiler.profile_to_workspace(model, inputs, name=path.stem, workspace=tmp_path, warmup=1, iters=1)
    types = [entry.kernel_type for entry in plan.entries]
    assert types, plan.regions
    if path.stem in (NEW - MENU_ONLY) | CONVOLUTIONAL:
        assert any(store.is_region(t) for t in types), (types, plan.regions)
