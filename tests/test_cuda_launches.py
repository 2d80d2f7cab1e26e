"""cuda_launches: a CUDA kernel file's own kernels are told apart from libraries', PyTorch's and
foreign ones, from the demangled names the profiler reports (here: synthetic lists of real-looking
names), and a call passes only with an own kernel, no library or foreign one, all on the timer's stream.
The profiling itself needs a GPU: benchmarks/cuda_check.py backend and the GPU-only attack tests run it."""

import pytest
import torch

from autokernel.judge import cuda_launches as cl
from autokernel.judge.cuda_launches import KernelEvent

SOURCE = r"""
// __global__ void commented_out(float* y)
template <typename T, int GROUP>
__global__ void __launch_bounds__(1024) rows_kernel(const T* __restrict__ x, T* y) {}
__global__ void
  plain_kernel(float* y) {}
namespace mine { __global__ void inner_kernel() {} }
torch::Tensor entry(torch::Tensor x) { return x; }
"""
OWN = cl.global_function_names(SOURCE)
MARKER = KernelEvent("_autokernel_stream_marker", 7)
OWN_EVENT = "void (anonymous namespace)::rows_kernel<c10::Half, 32>(c10::Half const*, c10::Half*)"
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
NVJET = "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"
XMMA = ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
        "kernel__5x_cublas")
CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>("
           "cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)")
# A library kernel whose name (without arguments) is one the file also uses for its own decoy.
SAME_NAME_FROM_CUBLAS = ("void plain_kernel<float, 128, 0, cublasDotParams<float const, float> >("
                         "cublasDotParams<float const, float>)")
TRITON = "triton_poi_fused_softmax_0"


def test_global_function_names_are_read_from_the_source():
    assert OWN == {"rows_kernel", "plain_kernel", "inner_kernel"}


@pytest.mark.parametrize("name, kind", [
    (OWN_EVENT, "own"), ("plain_kernel(float*)", "own"), ("void mine::inner_kernel()", "own"),
    (FILL, "pytorch"), ("at::cuda::(anonymous namespace)::spin_kernel(long)", "pytorch"),
    (NVJET, "library"), (XMMA, "library"), (CUTLASS, "library"), (SAME_NAME_FROM_CUBLAS, "library"),
    (TRITON, "foreign"), ("void other_kernel(float*)", "foreign"), ("void at_kernel(float*)", "foreign"),
    ("void thrust::detail::plain_kernel(float*)", "library"), ("void flash::plain_kernel(float*)", "library"),
    ("void mine::cutlass::plain_kernel(float*)", "library"), ("void cub::plain_kernel(float*)", "library"),
])
def test_kernel_kinds(name, kind):
    assert cl.kind_of(name, OWN) == kind


def test_an_own_kernel_with_pytorch_copies_on_the_timer_stream_passes():
    verdict = cl.judge_launches([MARKER, KernelEvent(FILL, 7), KernelEvent(OWN_EVENT, 7)], OWN)
    assert verdict.problem is None and verdict.own == 1


@pytest.mark.parametrize("events, expected", [
    ([KernelEvent(FILL, 7)], "launched none of CUDA_SOURCE's kernels"),
    ([KernelEvent(OWN_EVENT, 7), KernelEvent(NVJET, 7)], "ran the library kernel nvjet_hsh"),
    ([KernelEvent(OWN_EVENT, 7), KernelEvent(SAME_NAME_FROM_CUBLAS, 7)], "(cublas)"),
    ([KernelEvent(OWN_EVENT, 7), KernelEvent(TRITON, 7)], "neither one of CUDA_SOURCE's __global__ functions"),
    ([KernelEvent(OWN_EVENT, 9)], "on a side stream"),
    ([KernelEvent(OWN_EVENT, 7), KernelEvent(FILL, 9)], "on a side stream"),
])
def test_calls_the_judge_refuses(events, expected):
    verdict = cl.judge_launches([MARKER, *events], OWN)
    assert verdict.problem is not None and expected in verdict.problem


def test_a_suffixed_marker_name_is_still_the_marker():
    suffixed = KernelEvent("_autokernel_stream_marker_0d", 7)
    assert cl.judge_launches([suffixed, KernelEvent(OWN_EVENT, 7)], OWN).problem is None


def test_without_exactly_one_marker_the_events_are_not_trusted():
    assert "0 stream markers" in cl.judge_launches([KernelEvent(OWN_EVENT, 7)], OWN).problem
    assert "2 stream markers" in cl.judge_launches([MARKER, MARKER, KernelEvent(OWN_EVENT, 7)], OWN).problem


@pytest.mark.parametrize("source, expected", [
    ("int x;", "defines no __global__ function"),
    ("__global__ void nvjet_hsh_decoy() {}", "like a library's"),
    ("__global__ void sm90_xmma_gemm_decoy() {}", "like a library's"),
    ("__global__ void _autokernel_stream_marker() {}", "like a library's (or the judge's)"),
    ("namespace at { namespace native { __global__ void decoy() {} } }", "opens namespace at"),
    ("namespace cutlass { __global__ void decoy() {} }", "opens namespace cutlass"),
])
def test_sources_whose_kernels_cannot_be_told_apart_are_refused(source, expected):
    assert expected in cl.cuda_source_problem(source)


def test_the_starters_sources_are_accepted():
    from autokernel.core.paths import ROOT

    for name in ("rmsnorm", "softmax", "matmul"):
        literals = cl.file_literals((ROOT / "kernels" / "cuda" / f"{name}.py").read_text())
        assert literals["BACKEND"] == "cuda"
        assert cl.cuda_source_problem(literals["CUDA_SOURCE"]) is None
        # Every kernel is found, __launch_bounds__ and templates included: one missed is one the judge refuses.
        assert len(cl.global_function_names(literals["CUDA_SOURCE"])) == literals["CUDA_SOURCE"].count("__global__")


def test_qualified_names():
    assert cl.qualified_name(OWN_EVENT) == "rows_kernel"
    # Undemangled, as a profiler without a demangler reports them.
    assert cl.qualified_name("_ZN12_GLOBAL__N_111rows_kernelIN3c104HalfELi32EEEvPKT_PS3_") == "rows_kernel"
    assert cl.qualified_name("_ZN4mine12inner_kernelEv") == "mine::inner_kernel"
    assert cl.qualified_name("_Z12plain_kernelPf") == "plain_kernel"
    assert cl.kind_of("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_10FillFunctorIfEEEEviT0_", OWN) == \
        "pytorch"
    assert cl.kind_of("_Z12plain_kernelIfLi128ELi0E15cublasDotParamsIKffEEvT2_", OWN) == "library"
    assert cl.qualified_name(FILL) == "at::native::vectorized_elementwise_kernel"
    assert cl.qualified_name(NVJET) == NVJET


def test_the_judges_marker_kernel_carries_the_marker_name():
    from autokernel.judge import stream_marker

    assert stream_marker._autokernel_stream_marker.__name__ == cl.MARKER_KERNEL


def test_watch_for_only_cuda_files_on_a_gpu(tmp_path):
    import torch

    triton_file = tmp_path / "kernel.py"
    triton_file.write_text('KERNEL_TYPE = "softmax"\nBACKEND = "triton"\n')
    assert cl.watch_for(triton_file, torch.device("cuda", 0)) is None
    assert cl.watch_for(tmp_path / "missing.py", torch.device("cuda", 0)) is None
    from autokernel.core.paths import STARTERS_DIR

    assert cl.watch_for(STARTERS_DIR / "cuda" / "softmax.py", torch.device("cpu")) is None


class _Event211:
    """A kineto event as torch 2.11 (the GPU image) gives it: no activity_type()."""

    def __init__(self, name, device_type):
        self._name, self._device_type = name, device_type

    def name(self):
        return self._name

    def device_type(self):
        return self._device_type


class _EventWithActivity(_Event211):
    def __init__(self, name, device_type, activity):
        super().__init__(name, device_type)
        self._activity = activity

    def activity_type(self):
        return self._activity


def test_kernel_events_are_told_apart_with_or_without_activity_type():
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    assert cl.is_kernel_event(_Event211("void rms_norm_kernel<128>(...)", cuda))
    assert not cl.is_kernel_event(_Event211("Memcpy DtoD (Device -> Device)", cuda))
    assert not cl.is_kernel_event(_Event211("Memset (Device)", cuda))
    assert not cl.is_kernel_event(_Event211("aten::empty", cpu))
    assert cl.is_kernel_event(_EventWithActivity("k", cuda, "kernel"))
    assert not cl.is_kernel_event(_EventWithActivity("Memcpy HtoD", cuda, "gpu_memcpy"))
