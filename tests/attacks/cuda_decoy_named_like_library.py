"""CUDA attack: the decoy of cuda_decoy_then_cublas named like an H100 cuBLAS kernel (nvjet_...), so that the
library's kernel events would pass for the file's own.

Rejected in smoke: CUDA_SOURCE may not name a kernel like a library's (cuda_launches.cuda_source_problem),
and the loop's contract check refuses the file before it is benched.
"""

import torch

from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "matmul"
BACKEND = "cuda"
TUNABLES = {"UNUSED": 1}
TUNABLE_CHOICES = {"UNUSED": [1]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

__global__ void nvjet_hsh_128x128_64x4_decoy(float* out) { if (threadIdx.x == 0) out[0] = 1.f; }

torch::Tensor matmul_entry(torch::Tensor a, torch::Tensor b) {
  auto scratch = torch::empty({1}, a.options().dtype(torch::kFloat));
  auto stream = at::cuda::getCurrentCUDAStream();
  nvjet_hsh_128x128_64x4_decoy<<<1, 32, 0, stream>>>(scratch.data_ptr<float>());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  auto c = torch::empty({m, n}, a.options());
  const cudaDataType_t type = a.scalar_type() == torch::kHalf ? CUDA_R_16F
                            : a.scalar_type() == torch::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.f, beta = 0.f;
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  // Row-major C = A B is column-major C^T = B^T A^T.
  TORCH_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.data_ptr(), type, n, a.data_ptr(),
                           type, k, &beta, c.data_ptr(), type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
              == CUBLAS_STATUS_SUCCESS, "cublasGemmEx failed");
  return c;
}
"""

# Not linked against a cuBLAS of its own: cublasGemmEx resolves to the cuBLAS torch already loaded.
_ext = load_cuda(CUDA_SOURCE, ["matmul_entry"], TUNABLES)


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _ext.matmul_entry(a.contiguous(), b.contiguous())
