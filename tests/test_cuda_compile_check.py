"""benchmarks/cuda_compile_check.py: reading ptxas's report, naming every kernel instance, walking the Hopper
tunables; and, where NVRTC and ptxas are found (not in CI's dependencies: $AUTOKERNEL_CUDA_TOOLS, the nvidia
wheels, Triton's ptxas, CUDA_HOME), the CUDA GEMM starter's device code built for sm_90a without a spill."""

import math
import sys

import pytest

from autokernel import cuda_launches
from autokernel.paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import cuda_compile_check as ccc  # noqa: E402

MATMUL = cuda_launches.file_literals((ROOT / "kernels" / "cuda" / "matmul.py").read_text())

# ptxas -v's report of two kernels (sm_90a, CUDA 12.9), with the warning a serialised wgmma pipeline gets.
PTXAS_LOG = """ptxas info    : 96 bytes gmem
ptxas info    : Compiling entry function '_ZN1_wgmmaI6__halfEEv' for 'sm_90a'
ptxas info    : Function properties for _ZN1_wgmmaI6__halfEEv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 64 bytes smem
ptxas info    : Compile time = 334.090 ms
ptxas info    : Compiling entry function '_ZN1_sgemmEv' for 'sm_90a'
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the presence \
of Extern calls in the function '_ZN1_sgemmEv'.
ptxas info    : Function properties for _ZN1_sgemmEv
    16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16896 bytes smem
"""


def test_the_ptxas_report_is_read_per_kernel():
    reports = {r.name: r for r in ccc.parse_ptxas(PTXAS_LOG, {"_ZN1_wgmmaI6__halfEEv": "wgmma<__half>"})}
    assert set(reports) == {"wgmma<__half>", "_ZN1_sgemmEv"}
    wgmma, sgemm = reports["wgmma<__half>"], reports["_ZN1_sgemmEv"]
    assert (wgmma.registers, wgmma.spill_stores, wgmma.spill_loads, wgmma.shared) == (168, 0, 0, 64)
    assert wgmma.clean and not sgemm.clean
    assert (sgemm.registers, sgemm.stack, sgemm.spill_stores, sgemm.spill_loads) == (255, 16, 12, 8)
    assert len(sgemm.warnings) == 1 and "serialized" in sgemm.warnings[0]


def test_every_kernel_is_named_once_per_16_bit_type():
    assert ccc.kernel_instances(MATMUL["CUDA_SOURCE"]) == [
        "gemm_tensor_core_kernel<__half>", "gemm_tensor_core_kernel<__nv_bfloat16>",
        "gemm_wgmma_kernel<__half>", "gemm_wgmma_kernel<__nv_bfloat16>", "sgemm_kernel"]


def test_nvrtc_needs_the_host_part_behind_the_guard():
    assert ccc.device_source(MATMUL["CUDA_SOURCE"]) == MATMUL["CUDA_SOURCE"]
    softmax = cuda_launches.file_literals((ROOT / "kernels" / "cuda" / "softmax.py").read_text())
    with pytest.raises(ValueError, match="__CUDACC_RTC__"):
        ccc.device_source(softmax["CUDA_SOURCE"])


def test_the_combinations_walk_every_hopper_choice_and_keep_the_rest():
    tunables, choices = MATMUL["TUNABLES"], MATMUL["TUNABLE_CHOICES"]
    combinations = ccc.hopper_combinations(tunables, choices)
    hopper = [name for name in choices if name.startswith("WG_")]
    assert len(hopper) == 4 and len(combinations) == math.prod(len(choices[n]) for n in hopper)
    assert len({tuple(sorted(c.items())) for c in combinations}) == len(combinations)
    assert all({k: v for k, v in c.items() if k not in hopper} == {k: v for k, v in tunables.items() if k not in hopper}
               for c in combinations)


def test_a_static_assert_is_told_from_other_failures():
    refused = ccc.CompileError('NVRTC compile failed (status 6):\nCUDA_SOURCE(287): error: static assertion failed '
                               'with "over 128 float32 accumulators per thread"\n')
    assert ccc.static_assert_message(refused) == "over 128 float32 accumulators per thread"
    assert ccc.static_assert_message(ccc.CompileError('CUDA_SOURCE(9): error: identifier "x" is undefined')) is None


@pytest.fixture(scope="module")
def tools():
    found, why = ccc.find_tools()
    if found is None:
        pytest.skip(f"needs NVRTC and ptxas (not CI dependencies): {why}")
    return found


def test_the_default_build_compiles_for_sm90a_without_spills(tools):
    reports = ccc.check(MATMUL["CUDA_SOURCE"], MATMUL["TUNABLES"], tools)
    assert sorted(r.name for r in reports) == sorted(ccc.kernel_instances(MATMUL["CUDA_SOURCE"]))
    assert all(r.clean and r.registers > 0 for r in reports), "\n".join(r.line() for r in reports)
    # 384 threads, one block per SM: ptxas may give each at most 65536 / 384 registers, 168 in its steps of 8.
    assert all(r.registers <= 168 for r in reports if "wgmma" in r.name)


def test_a_combination_that_does_not_fit_is_refused_by_its_static_assert(tools):
    too_wide = {**MATMUL["TUNABLES"], "WG_BLOCK_N": 256, "WG_CONSUMERS": 1}     # 256 accumulators per thread
    with pytest.raises(ccc.CompileError) as refused:
        ccc.check(MATMUL["CUDA_SOURCE"], too_wide, tools, ["gemm_wgmma_kernel<__half>"])
    assert "over 128 float32 accumulators per thread" in ccc.static_assert_message(refused.value)
