"""Tests for autokernel/verify/headroom.py: sorting a compiled forward's kernels and the ceiling they leave."""

from dataclasses import replace

import pytest
import torch
from rich.console import Console

from autokernel.verify import headroom, verify_report
from tests.test_verify_report import wide_report

# Kernel names as the H100's profiler printed them for the LLaMA 4x1024 under torch.compile.
H100_KERNELS = {
    "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN": 2583.9,
    "nvjet_sm90_hsh_192x192_64x4_1x2_h_bz_coopB_TNN": 2138.1,
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0": 423.3,
    "triton_poi_fused__unsafe_view_mul_silu_4": 424.5,
    "triton_poi_fused__scaled_dot_product_cudnn_attention__unsafe_view_add_cat_mul_slice_sub_transpose_view_1": 194.9,
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>>": 10.0,
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off": 5.0,
    "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_f16_128x128_32x4_nn_align8>": 5.0,
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80": 7.0,
}


def test_kernels_are_sorted_by_name_and_inductors_own_are_the_rest_whatever_they_fuse():
    groups = {name: headroom.kernel_group(name) for name in H100_KERNELS}
    assert [name for name, group in groups.items() if group == "gemm"] == [
        "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", "nvjet_sm90_hsh_192x192_64x4_1x2_h_bz_coopB_TNN",
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
        "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_f16_128x128_32x4_nn_align8>"]
    assert {name for name, group in groups.items() if group == "attention"} == {
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80"}
    # An Inductor kernel that fused the attention's neighbours is still Inductor's
    assert groups["triton_poi_fused__scaled_dot_product_cudnn_attention__unsafe_view_add_cat_mul_slice_sub_transpose"
                  "_view_1"] == "other"


def test_the_ceiling_is_pytorchs_best_over_the_gemms_time():
    groups = headroom.group_times(H100_KERNELS)
    assert groups["gemm"] == pytest.approx(2583.9 + 2138.1 + 5.0 + 5.0)
    found = headroom.Headroom(groups["gemm"], groups["attention"], groups["other"], best_ms=7.69)
    assert found.ceiling() == pytest.approx(7690 / groups["gemm"])
    assert found.ceiling(keep_attention=True) == pytest.approx(7690 / (groups["gemm"] + groups["attention"]))
    assert "at most 1.63x PyTorch's best (7.690 ms)" in found.summary() and "GEMMs 82%" in found.summary()
    assert headroom.Headroom(0.0, 10.0, 5.0, 1.0).ceiling() is None
    assert "runs no GEMM" in headroom.Headroom(0.0, 10.0, 5.0, 1.0).summary()


def test_without_a_gpu_there_is_no_headroom_to_measure(monkeypatch):
    monkeypatch.setattr(headroom.torch.cuda, "is_available", lambda: False)
    assert headroom.kernel_times(lambda: torch.ones(2)) is None


def test_verify_prints_the_headroom_under_its_verdict():
    found = headroom.Headroom(5462.4, 423.3, 1141.4, 7.69).to_json()
    console = Console(record=True, width=300)
    verify_report._print_headroom(replace(wide_report(), headroom=found), console)
    text = console.export_text()
    assert "headroom: torch.compile's forward spends its GPU kernel time on GEMMs 78%" in text
    assert "at most 1.41x" in text
    verify_report._print_headroom(replace(wide_report(), headroom=None), console)
    assert console.export_text() == ""
