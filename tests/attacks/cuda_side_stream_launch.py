"""CUDA attack: a correct softmax kernel launched on a stream the C++ side created itself, then waited for.

No PyTorch op or Triton launch happens on a side stream, so the Triton-era guards see nothing; the
timer's events on its own stream would miss the kernel's time. Rejected in smoke: the kernel event
is not on the judge's marker stream (cuda_launches).
"""

import torch

from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "softmax"
BACKEND = "cuda"
TUNABLES = {"THREADS": 128}
TUNABLE_CHOICES = {"THREADS": [128]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <ATen/Dispatch.h>

// One thread per row: slow and correct.
template <typename T>
__global__ void row_softmax_kernel(const T* x, T* y, int64_t rows, int64_t cols) {
  const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* xr = x + row * cols;
  float mx = -INFINITY, sum = 0.f;
  for (int64_t c = 0; c < cols; ++c) mx = fmaxf(mx, static_cast<float>(xr[c]));
  for (int64_t c = 0; c < cols; ++c) sum += expf(static_cast<float>(xr[c]) - mx);
  for (int64_t c = 0; c < cols; ++c) y[row * cols + c] = static_cast<T>(expf(static_cast<float>(xr[c]) - mx) / sum);
}

torch::Tensor softmax_entry(torch::Tensor x) {
  static cudaStream_t side = nullptr;
  if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  auto y = torch::empty_like(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "side", [&] {
    row_softmax_kernel<scalar_t><<<(unsigned)((rows + THREADS - 1) / THREADS), THREADS, 0, side>>>(
        x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), rows, cols);
  });
  cudaStreamSynchronize(side);
  return y;
}
"""

_ext = load_cuda(CUDA_SOURCE, ["softmax_entry"], TUNABLES)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        return torch.empty_like(x)
    return _ext.softmax_entry(x.reshape(-1, x.shape[-1]).contiguous()).reshape(x.shape)
