"""benchmarks/cuda_check.py compile: reading ptxas's report, naming every kernel instance, walking the Hopper
tunables and the softmax starter's; and, where NVRTC and ptxas are found (not in CI's dependencies:
$AUTOKERNEL_CUDA_TOOLS, the nvidia wheels, Triton's ptxas, CUDA_HOME), the CUDA GEMM and softmax starters'
device code built for sm_90a without a spill."""

import math

import pytest

from autokernel.core.paths import ROOT
from autokernel.judge import cuda_launches
from benchmarks.suites import cuda_compile_check as ccc

MATMUL = cuda_launches.file_literals((ROOT / "kernels" / "cuda" / "matmul.py").read_text())
SOFTMAX = cuda_launches.file_literals((ROOT / "kernels" / "cuda" / "softmax.py").read_text())

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
    assert ccc.device_source(SOFTMAX["CUDA_SOURCE"]) == SOFTMAX["CUDA_SOURCE"]
    unguarded = "#include <torch/types.h>\n__global__ void k(float* y) { y[0] = 1.f; }\n"
    with pytest.raises(ValueError, match="__CUDACC_RTC__"):
        ccc.device_source(unguarded)


def test_the_combinations_walk_every_hopper_choice_and_keep_the_rest():
    tunables, choices = MATMUL["TUNABLES"], MATMUL["TUNABLE_CHOICES"]
    walk = ccc.walk_of(MATMUL["CUDA_SOURCE"], choices)
    combinations = ccc.combinations(tunables, choices, walk.names, walk.fixed)
    hopper = [name for name in choices if name.startswith("WG_")]
    assert walk.names == hopper and len(hopper) == 4
    assert len(combinations) == math.prod(len(choices[n]) for n in hopper)
    assert len({tuple(sorted(c.items())) for c in combinations}) == len(combinations)
    assert all({k: v for k, v in c.items() if k not in hopper} == {k: v for k, v in tunables.items() if k not in hopper}
               for c in combinations)
    assert walk.instances(combinations[0]) == ["gemm_wgmma_kernel<__half>", "gemm_wgmma_kernel<__nv_bfloat16>"]


def test_softmax_instances_are_every_kernel_its_entry_point_can_launch():
    tunables = {**SOFTMAX["TUNABLES"], "BLOCK_THREADS": 256, "ROWS_PER_BLOCK": 4, "MAX_PACKS": 8}
    instances = ccc.instances_of(SOFTMAX["CUDA_SOURCE"], tunables)
    regs = [(name, threads) for name, threads in instances if name.startswith("softmax_regs_kernel")]
    # 3 types x 2 groups (a warp per row: 4 rows of 32 threads a block; a block of 256 per row) x 1, 2, 4, 8 pieces.
    assert len(regs) == 3 * 2 * 4 and len(instances) == len(regs) + 3 * 2
    assert ("softmax_loop_kernel<__half, 32>", 128) in instances
    assert ("softmax_loop_kernel<float, 256>", 256) in instances
    # The pieces are capped by CUDA_SOURCE's own fitting_packs, evaluated by NVRTC in the name.
    assert ("softmax_regs_kernel<__nv_bfloat16, 256, (8 < fitting_packs<__nv_bfloat16, 256>() ? 8 : "
            "fitting_packs<__nv_bfloat16, 256>())>", 256) in regs
    assert {name.split("<")[1].split(",")[0] for name, _ in instances} == {"__half", "__nv_bfloat16", "float"}


def test_the_softmax_walk_covers_every_choice_that_changes_its_kernels():
    tunables, choices = SOFTMAX["TUNABLES"], SOFTMAX["TUNABLE_CHOICES"]
    walk = ccc.walk_of(SOFTMAX["CUDA_SOURCE"], choices)
    assert walk.names == ["PACKED_ROW", "LOCAL_MAX", "ROWS_PER_BLOCK"] and walk.fixed == {"MAX_PACKS": 16}
    combinations = ccc.combinations(tunables, choices, walk.names, walk.fixed)
    assert len(combinations) == 2 * 2 * len(choices["ROWS_PER_BLOCK"])
    for combination in combinations:
        groups = {int(name.split(",")[1].strip(" >")) for name, _ in walk.instances(combination)}
        # The block kernels (which ROWS_PER_BLOCK does not change) once per PACKED_ROW and LOCAL_MAX.
        first = combination["ROWS_PER_BLOCK"] == choices["ROWS_PER_BLOCK"][0]
        assert groups == ({32, *choices["BLOCK_THREADS"]} if first else {32})


def test_an_instance_computed_in_its_name_is_labelled_by_its_numbers():
    expression = ("softmax_regs_kernel<__half, 512, "
                  "(16 < fitting_packs<__half, 512>() ? 16 : fitting_packs<__half, 512>())>")
    lowered = "_ZN42_GLOBAL__N__4731c39d_4_k_cu_3a495ab7_2628719softmax_regs_kernelI6__halfLi512ELi8EEEvPKT_PS2_xxx"
    assert ccc.instance_label(expression, lowered) == "softmax_regs_kernel<__half, 512, 8>"
    assert ccc.instance_label("gemm_wgmma_kernel<__half>", "_Z1xv") == "gemm_wgmma_kernel<__half>"


def test_blocks_per_sm_by_registers_and_threads():
    assert ccc.blocks_per_sm(56, 512) == 2           # 56 * 512 * 2 = 57344 of 65536 registers
    assert ccc.blocks_per_sm(110, 512) == 1
    assert ccc.blocks_per_sm(57, 512) == 2           # given out 8 at a time: 64 * 512 * 2 = 65536
    assert ccc.blocks_per_sm(65, 512) == 1
    assert ccc.blocks_per_sm(16, 1024) == 2          # threads, not registers
    assert ccc.blocks_per_sm(16, 32) == 32           # blocks


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


def test_the_softmax_starter_compiles_without_spills_and_packed_rows_fit_twice_the_blocks(tools):
    reports = {r.name: r for r in ccc.check(SOFTMAX["CUDA_SOURCE"], SOFTMAX["TUNABLES"], tools)}
    packed = {r.name: r for r in ccc.check(SOFTMAX["CUDA_SOURCE"], {**SOFTMAX["TUNABLES"], "PACKED_ROW": True}, tools)}
    for built in (reports, packed):
        assert all(r.clean and r.registers > 0 for r in built.values()), "\n".join(r.line() for r in built.values())
        assert len(built) == len(ccc.instances_of(SOFTMAX["CUDA_SOURCE"], SOFTMAX["TUNABLES"]))
    # A 32768-wide 16-bit row over 512 threads is 8 pieces a thread: one block per SM as floats, two kept packed
    # (256 rows in one wave on 132 SMs). A 2048-wide row over a warp is 8 pieces too: kept packed, at least 4 blocks
    # of 8 rows (4096 rows in one wave).
    for t in ("__half", "__nv_bfloat16"):
        assert reports[f"softmax_regs_kernel<{t}, 512, 8>"].threads == 512
        assert ccc.blocks_per_sm(reports[f"softmax_regs_kernel<{t}, 512, 8>"].registers, 512) == 1
        assert ccc.blocks_per_sm(packed[f"softmax_regs_kernel<{t}, 512, 8>"].registers, 512) == 2
        assert ccc.blocks_per_sm(packed[f"softmax_regs_kernel<{t}, 32, 8>"].registers, 256) >= 4


def test_every_softmax_kernel_any_choice_can_launch_compiles_without_spills(tools):
    walked = ccc.walk_reports(SOFTMAX["CUDA_SOURCE"], SOFTMAX["TUNABLES"], SOFTMAX["TUNABLE_CHOICES"], tools)
    assert len(walked) == 20
    for combination, reports in walked:
        assert not isinstance(reports, ccc.CompileError), f"{combination}: {reports}"
        assert all(r.clean for r in reports), f"{combination}:\n" + "\n".join(r.line() for r in reports if not r.clean)


def test_a_combination_that_does_not_fit_is_refused_by_its_static_assert(tools):
    too_wide = {**MATMUL["TUNABLES"], "WG_BLOCK_N": 256, "WG_CONSUMERS": 1}     # 256 accumulators per thread
    with pytest.raises(ccc.CompileError) as refused:
        ccc.check(MATMUL["CUDA_SOURCE"], too_wide, tools, ["gemm_wgmma_kernel<__half>"])
    assert "over 128 float32 accumulators per thread" in ccc.static_assert_message(refused.value)
