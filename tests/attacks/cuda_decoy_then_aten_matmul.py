"""CUDA attack: launch a decoy kernel of CUDA_SOURCE's own, then return at::matmul called from C++.

A call from C++ into ATen still goes through PyTorch's dispatcher, so the worker's dispatch-mode
guard sees it. Rejected in smoke, naming the op.
"""

import torch

from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "matmul"
BACKEND = "cuda"
TUNABLES = {"UNUSED": 1}
TUNABLE_CHOICES = {"UNUSED": [1]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <c10/cuda/CUDAStream.h>

__global__ void decoy_kernel(float* out) { if (threadIdx.x == 0) out[0] = 1.f; }

torch::Tensor matmul_entry(torch::Tensor a, torch::Tensor b) {
  auto scratch = torch::empty({1}, a.options().dtype(torch::kFloat));
  decoy_kernel<<<1, 32, 0, c10::cuda::getCurrentCUDAStream()>>>(scratch.data_ptr<float>());
  return at::matmul(a, b);
}
"""

_ext = load_cuda(CUDA_SOURCE, ["matmul_entry"], TUNABLES)


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _ext.matmul_entry(a, b)
