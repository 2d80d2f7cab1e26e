"""RMSNorm starter in CUDA C++: over the last dimension or dim 1, statistics in float32.

Over the last dimension, a group of threads normalizes one row: a warp per row for rows up to
WARP_ROW_MAX_N elements (ROWS_PER_BLOCK rows to a block, so short rows still fill the machine),
else the whole block of BLOCK_THREADS threads. The row is read twice, once for the sum of squares
and once for the write; the second read hits the cache. Where the row, its stride and every
pointer allow, loads and stores move 16 bytes at a time; otherwise one element at a time.

Over dim 1 of x (B, C, ...), x is viewed as (B, C, I): one thread per position (b, i) walks its C
channels, which lie I elements apart, so adjacent threads read adjacent memory.
"""

import torch

from autokernel.cuda_build import load_cuda

KERNEL_TYPE = "rmsnorm"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build.
# BLOCK_THREADS: threads per row for rows longer than WARP_ROW_MAX_N.
# ROWS_PER_BLOCK: rows (one warp each) per block for short rows.
# CHANNEL_THREADS: threads per block over dim 1.
TUNABLES = {"BLOCK_THREADS": 256, "WARP_ROW_MAX_N": 1024, "ROWS_PER_BLOCK": 8, "CHANNEL_THREADS": 256}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256, 512, 1024], "WARP_ROW_MAX_N": [0, 256, 512, 1024, 2048],
                   "ROWS_PER_BLOCK": [1, 2, 4, 8, 16], "CHANNEL_THREADS": [64, 128, 256, 512]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

namespace {

constexpr int WARP = 32;

// 16 bytes of elements, loaded or stored as one vector.
template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The sum over a group of GROUP threads (a warp, or the whole block); every thread gets it.
template <int GROUP>
__device__ __forceinline__ float group_sum(float v, float* scratch) {
  v = warp_sum(v);
  if constexpr (GROUP > WARP) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_sum(lane < GROUP / WARP ? scratch[lane] : 0.f);
  }
  return v;
}

template <typename T, int GROUP>
__global__ void rmsnorm_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                    int64_t n_rows, int64_t n_cols, int64_t x_stride, float eps, bool vectorized) {
  __shared__ float scratch[WARP];
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  // A whole group leaves together: with GROUP == blockDim.x every row exists, so no __syncthreads is skipped.
  if (row >= n_rows) return;
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  float sum_sq = 0.f;
  if (vectorized) {
    // Unrolled so each thread has several 16-byte loads in flight: what keeps HBM busy.
#pragma unroll 4
    for (int64_t c = (int64_t)t * V; c < n_cols; c += (int64_t)GROUP * V) {
      const Pack<T> p = *reinterpret_cast<const Pack<T>*>(xr + c);
#pragma unroll
      for (int k = 0; k < V; ++k) { const float f = static_cast<float>(p.v[k]); sum_sq += f * f; }
    }
  } else {
    for (int64_t c = t; c < n_cols; c += GROUP) { const float f = static_cast<float>(xr[c]); sum_sq += f * f; }
  }
  const float inv_rms = rsqrtf(group_sum<GROUP>(sum_sq, scratch) / (float)n_cols + eps);
  if (vectorized) {
#pragma unroll 4
    for (int64_t c = (int64_t)t * V; c < n_cols; c += (int64_t)GROUP * V) {
      const Pack<T> p = *reinterpret_cast<const Pack<T>*>(xr + c);
      const Pack<T> q = *reinterpret_cast<const Pack<T>*>(w + c);
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k)
        out.v[k] = static_cast<T>(static_cast<float>(p.v[k]) * inv_rms * static_cast<float>(q.v[k]));
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    }
  } else {
    for (int64_t c = t; c < n_cols; c += GROUP)
      yr[c] = static_cast<T>(static_cast<float>(xr[c]) * inv_rms * static_cast<float>(w[c]));
  }
}

// x and y contiguous (outer, C, I): one thread per position normalizes its C channels.
template <typename T>
__global__ void rmsnorm_channels_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                        int64_t n_positions, int64_t n_channels, int64_t n_inner, float eps) {
  const int64_t pos = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= n_positions) return;
  const int64_t base = (pos / n_inner) * n_channels * n_inner + pos % n_inner;
  float sum_sq = 0.f;
  for (int64_t c = 0; c < n_channels; ++c) {
    const float f = static_cast<float>(x[base + c * n_inner]);
    sum_sq += f * f;
  }
  const float inv_rms = rsqrtf(sum_sq / (float)n_channels + eps);
  for (int64_t c = 0; c < n_channels; ++c)
    y[base + c * n_inner] = static_cast<T>(static_cast<float>(x[base + c * n_inner]) * inv_rms *
                                           static_cast<float>(w[c]));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

torch::Tensor rmsnorm_rows(torch::Tensor x, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.stride(1) == 1, "rmsnorm_rows: x must be a CUDA (rows, N) tensor "
              "with contiguous rows");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == x.size(1) && weight.dtype() == x.dtype(),
              "rmsnorm_rows: weight must be contiguous (N,) of x's dtype");
  const int64_t n_rows = x.size(0), n_cols = x.size(1);
  auto y = torch::empty({n_rows, n_cols}, x.options());
  if (n_rows == 0 || n_cols == 0) return y;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "rmsnorm_rows",
                                  [&] {
    constexpr int V = 16 / sizeof(scalar_t);
    const bool vectorized = n_cols % V == 0 && x.stride(0) % V == 0 && aligned16(x.data_ptr()) &&
                            aligned16(weight.data_ptr()) && aligned16(y.data_ptr());
    const auto* xp = x.data_ptr<scalar_t>();
    const auto* wp = weight.data_ptr<scalar_t>();
    auto* yp = y.data_ptr<scalar_t>();
    if (n_cols <= WARP_ROW_MAX_N) {
      const int64_t blocks = (n_rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
      TORCH_CHECK(blocks < (1LL << 31), "rmsnorm_rows: too many rows");
      rmsnorm_rows_kernel<scalar_t, WARP><<<(unsigned)blocks, WARP * ROWS_PER_BLOCK, 0, stream>>>(
          xp, wp, yp, n_rows, n_cols, x.stride(0), (float)eps, vectorized);
    } else {
      TORCH_CHECK(n_rows < (1LL << 31), "rmsnorm_rows: too many rows");
      rmsnorm_rows_kernel<scalar_t, BLOCK_THREADS><<<(unsigned)n_rows, BLOCK_THREADS, 0, stream>>>(
          xp, wp, yp, n_rows, n_cols, x.stride(0), (float)eps, vectorized);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

torch::Tensor rmsnorm_channels(torch::Tensor x, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 3 && x.is_contiguous(), "rmsnorm_channels: x must be a contiguous CUDA "
              "(outer, C, I) tensor");
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == x.size(1) && weight.dtype() == x.dtype(),
              "rmsnorm_channels: weight must be contiguous (C,) of x's dtype");
  auto y = torch::empty_like(x);
  const int64_t n_positions = x.size(0) * x.size(2);
  if (n_positions == 0 || x.size(1) == 0) return y;
  const int64_t blocks = (n_positions + CHANNEL_THREADS - 1) / CHANNEL_THREADS;
  TORCH_CHECK(blocks < (1LL << 31), "rmsnorm_channels: too many positions");
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(),
                                  "rmsnorm_channels", [&] {
    rmsnorm_channels_kernel<scalar_t><<<(unsigned)blocks, CHANNEL_THREADS, 0, stream>>>(
        x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n_positions, x.size(1),
        x.size(2), (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}
"""

_ext = load_cuda(CUDA_SOURCE, ["rmsnorm_rows", "rmsnorm_channels"], TUNABLES)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, dim: int = -1) -> torch.Tensor:
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"rmsnorm: cannot normalize x {tuple(x.shape)} over dim {dim}")
    dim %= x.dim()
    n_cols = x.shape[dim]
    if weight.shape != (n_cols,):
        raise ValueError(f"rmsnorm: x {tuple(x.shape)} needs dimension {dim} matching weight "
                         f"{tuple(weight.shape)} of shape (N,)")
    weight = weight.to(x.dtype).contiguous()
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[dim + 1:].numel() != 1:
        x3d = x.reshape(x.shape[:dim].numel(), n_cols, x.shape[dim + 1:].numel()).contiguous()
        return _ext.rmsnorm_channels(x3d, weight, float(eps)).reshape(x.shape)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    return _ext.rmsnorm_rows(x2d, weight, float(eps)).reshape(x.shape)
