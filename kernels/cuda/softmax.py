"""Softmax starter in CUDA C++: softmax over the last dimension, statistics in float32.

A group of threads takes one row: a warp per row for rows up to WARP_ROW_MAX_N elements
(ROWS_PER_BLOCK rows to a block, so short rows still fill the machine), else the whole block of
BLOCK_THREADS threads. The first pass keeps an online (running max, running sum) per thread, so
the row is read once for its statistics; the groups' pairs are then merged. The second pass
reads the row again (from the cache) and writes exp(x - max) / sum. Where the row, its stride and
the pointers allow, loads and stores move 16 bytes at a time; otherwise one element at a time.
A row of -inf entries (an attention mask) adds nothing to the sum, as in PyTorch.
"""

import torch

from autokernel.cuda_build import load_cuda

KERNEL_TYPE = "softmax"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build.
# BLOCK_THREADS: threads per row for rows longer than WARP_ROW_MAX_N.
# ROWS_PER_BLOCK: rows (one warp each) per block for short rows.
TUNABLES = {"BLOCK_THREADS": 512, "WARP_ROW_MAX_N": 1024, "ROWS_PER_BLOCK": 8}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256, 512, 1024], "WARP_ROW_MAX_N": [0, 256, 512, 1024, 2048],
                   "ROWS_PER_BLOCK": [1, 2, 4, 8, 16]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

namespace {

constexpr int WARP = 32;

// 16 bytes of elements, loaded or stored as one vector.
template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

// A running (max, sum of exp(x - max)) over part of a row.
struct MaxSum { float max, sum; };

__device__ __forceinline__ void add(MaxSum& a, float x) {
  if (x > a.max) {                      // a new max rescales the sum (exp(-inf) = 0 while the sum is empty)
    a.sum = a.sum * expf(a.max - x) + 1.f;
    a.max = x;
  } else if (x != -INFINITY) {          // -inf adds nothing; also keeps exp(-inf - -inf) = nan out
    a.sum += expf(x - a.max);
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.f};
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) {
    const MaxSum other = {__shfl_xor_sync(0xffffffffu, v.max, offset), __shfl_xor_sync(0xffffffffu, v.sum, offset)};
    v = merge(v, other);
  }
  return v;
}

// The merged pair over a group of GROUP threads (a warp, or the whole block); every thread gets it.
template <int GROUP>
__device__ __forceinline__ MaxSum group_merge(MaxSum v, MaxSum* scratch) {
  v = warp_merge(v);
  if constexpr (GROUP > WARP) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_merge(lane < GROUP / WARP ? scratch[lane] : MaxSum{-INFINITY, 0.f});
  }
  return v;
}

template <typename T, int GROUP>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n_rows, int64_t n_cols,
                                    int64_t x_stride, bool vectorized) {
  __shared__ MaxSum scratch[WARP];
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  // A whole group leaves together: with GROUP == blockDim.x every row exists, so no __syncthreads is skipped.
  if (row >= n_rows) return;
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  MaxSum stats = {-INFINITY, 0.f};
  if (vectorized) {
    // Unrolled so each thread has several 16-byte loads in flight: what keeps HBM busy.
#pragma unroll 4
    for (int64_t c = (int64_t)t * V; c < n_cols; c += (int64_t)GROUP * V) {
      const Pack<T> p = *reinterpret_cast<const Pack<T>*>(xr + c);
#pragma unroll
      for (int k = 0; k < V; ++k) add(stats, static_cast<float>(p.v[k]));
    }
  } else {
    for (int64_t c = t; c < n_cols; c += GROUP) add(stats, static_cast<float>(xr[c]));
  }
  stats = group_merge<GROUP>(stats, scratch);
  const float max = stats.max, inv_sum = 1.f / stats.sum;   // one reciprocal per row: multiplies are cheaper
  if (vectorized) {
#pragma unroll 4
    for (int64_t c = (int64_t)t * V; c < n_cols; c += (int64_t)GROUP * V) {
      const Pack<T> p = *reinterpret_cast<const Pack<T>*>(xr + c);
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = static_cast<T>(expf(static_cast<float>(p.v[k]) - max) * inv_sum);
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    }
  } else {
    for (int64_t c = t; c < n_cols; c += GROUP) yr[c] = static_cast<T>(expf(static_cast<float>(xr[c]) - max) * inv_sum);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.stride(1) == 1, "softmax_rows: x must be a CUDA (rows, N) tensor "
              "with contiguous rows");
  const int64_t n_rows = x.size(0), n_cols = x.size(1);
  auto y = torch::empty({n_rows, n_cols}, x.options());
  if (n_rows == 0 || n_cols == 0) return y;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "softmax_rows",
                                  [&] {
    constexpr int V = 16 / sizeof(scalar_t);
    const bool vectorized = n_cols % V == 0 && x.stride(0) % V == 0 && aligned16(x.data_ptr()) &&
                            aligned16(y.data_ptr());
    const auto* xp = x.data_ptr<scalar_t>();
    auto* yp = y.data_ptr<scalar_t>();
    if (n_cols <= WARP_ROW_MAX_N) {
      const int64_t blocks = (n_rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
      TORCH_CHECK(blocks < (1LL << 31), "softmax_rows: too many rows");
      softmax_rows_kernel<scalar_t, WARP><<<(unsigned)blocks, WARP * ROWS_PER_BLOCK, 0, stream>>>(
          xp, yp, n_rows, n_cols, x.stride(0), vectorized);
    } else {
      TORCH_CHECK(n_rows < (1LL << 31), "softmax_rows: too many rows");
      softmax_rows_kernel<scalar_t, BLOCK_THREADS><<<(unsigned)n_rows, BLOCK_THREADS, 0, stream>>>(
          xp, yp, n_rows, n_cols, x.stride(0), vectorized);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}
"""

_ext = load_cuda(CUDA_SOURCE, ["softmax_rows"], TUNABLES)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    n_cols = x.shape[-1] if x.dim() > 0 else 1
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x2d = x.reshape(-1, n_cols)
    if x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    return _ext.softmax_rows(x2d).reshape(x.shape)
