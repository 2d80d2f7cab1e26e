"""Softmax starter in CUDA C++: softmax over the last dimension, statistics in float32.

A group of threads takes one row: a warp per row for rows up to WARP_ROW_MAX_N elements
(ROWS_PER_BLOCK rows to a block, so short rows still fill the machine), else the whole block of
BLOCK_THREADS threads. Where the row fits in the group's registers (up to MAX_PACKS 16-byte
pieces per thread) it is read from memory once: each thread keeps its elements as floats, the
group takes the row's max, then each element becomes exp(x - max) in place (one exponential per
element: the exponentials, not the memory, bounded the first version, which took a running
max and sum with an exponential per element and another per output), then the sum, then the
write. Longer rows take three passes over memory (max, sum, write; the later ones mostly from
the cache). Loads and stores move 16 bytes at a time where the row, its stride and the pointers
allow, otherwise one element at a time (the looping kernel). Rows of -inf entries (an attention
mask) give NaN as in PyTorch; a -inf entry in a row with a finite max gives 0.
"""

import torch

from autokernel.cuda_build import load_cuda

KERNEL_TYPE = "softmax"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build.
# BLOCK_THREADS: threads per row for rows longer than WARP_ROW_MAX_N.
# ROWS_PER_BLOCK: rows (one warp each) per block for short rows.
# MAX_PACKS: 16-byte pieces of the row a thread holds in registers (longer rows loop over memory).
TUNABLES = {"BLOCK_THREADS": 512, "WARP_ROW_MAX_N": 2048, "ROWS_PER_BLOCK": 8, "MAX_PACKS": 8}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256, 512, 1024], "WARP_ROW_MAX_N": [0, 256, 512, 1024, 2048],
                   "ROWS_PER_BLOCK": [1, 2, 4, 8, 16], "MAX_PACKS": [2, 4, 8, 16]}

CUDA_SOURCE = r"""
#include <torch/types.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

namespace {

constexpr int WARP = 32;
constexpr float LOG2E = 1.4426950408889634f;

// 16 bytes of elements, loaded or stored as one vector.
template <typename T> struct alignas(16) Pack { T v[16 / sizeof(T)]; };

// Threads per block of a kernel whose groups are GROUP threads: a warp per row packs ROWS_PER_BLOCK rows.
template <int GROUP> constexpr int block_threads() { return GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP; }

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The max (or sum) over a group of GROUP threads (a warp, or the whole block); every thread gets it.
// Each reduction has its own scratch, so the second never overwrites what a slow warp still reads.
template <int GROUP>
__device__ __forceinline__ float group_max(float v, float* scratch) {
  v = warp_max(v);
  if constexpr (GROUP > WARP) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = warp_max(lane < GROUP / WARP ? scratch[lane] : -INFINITY);
  }
  return v;
}
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

// exp(x - max) as one exp2 (max == -inf, a fully masked row, gives NaN as in PyTorch).
__device__ __forceinline__ float exp_shifted(float x, float max) { return exp2f((x - max) * LOG2E); }

// The row in registers: PACKS 16-byte pieces per thread, read once. Needs 16-byte aligned rows.
template <typename T, int GROUP, int PACKS>
__global__ void __launch_bounds__(GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP) softmax_regs_kernel(
    const T* __restrict__ x, T* __restrict__ y, int64_t n_rows, int64_t n_cols, int64_t x_stride) {
  __shared__ float max_scratch[WARP], sum_scratch[WARP];
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  // A whole group leaves together: with GROUP == blockDim.x every row exists, so no __syncthreads is skipped.
  if (row >= n_rows) return;
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  float v[PACKS][V];
  float max = -INFINITY;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = ((int64_t)p * GROUP + t) * V;
    if (c < n_cols) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[p][k] = static_cast<float>(in.v[k]);
        max = fmaxf(max, v[p][k]);
      }
    }
  }
  max = group_max<GROUP>(max, max_scratch);
  float sum = 0.f;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    if (((int64_t)p * GROUP + t) * V < n_cols) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[p][k] = exp_shifted(v[p][k], max);
        sum += v[p][k];
      }
    }
  }
  const float inv_sum = 1.f / group_sum<GROUP>(sum, sum_scratch);
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = ((int64_t)p * GROUP + t) * V;
    if (c < n_cols) {
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = static_cast<T>(v[p][k] * inv_sum);
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    }
  }
}

// Rows too long for the registers, or not 16-byte aligned: max, sum and write, each a pass over the row.
template <typename T, int GROUP>
__global__ void __launch_bounds__(GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP) softmax_loop_kernel(
    const T* __restrict__ x, T* __restrict__ y, int64_t n_rows, int64_t n_cols, int64_t x_stride, bool vectorized) {
  __shared__ float max_scratch[WARP], sum_scratch[WARP];
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  if (row >= n_rows) return;
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  const int64_t step = vectorized ? (int64_t)GROUP * V : GROUP, first = vectorized ? (int64_t)t * V : t;
  float max = -INFINITY;
#pragma unroll 4
  for (int64_t c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      for (int k = 0; k < V; ++k) max = fmaxf(max, static_cast<float>(in.v[k]));
    } else {
      max = fmaxf(max, static_cast<float>(xr[c]));
    }
  }
  max = group_max<GROUP>(max, max_scratch);
  float sum = 0.f;
#pragma unroll 4
  for (int64_t c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      for (int k = 0; k < V; ++k) sum += exp_shifted(static_cast<float>(in.v[k]), max);
    } else {
      sum += exp_shifted(static_cast<float>(xr[c]), max);
    }
  }
  const float inv_sum = 1.f / group_sum<GROUP>(sum, sum_scratch);
  for (int64_t c = first; c < n_cols; c += step) {
    if (vectorized) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
      Pack<T> out;
      for (int k = 0; k < V; ++k) out.v[k] = static_cast<T>(exp_shifted(static_cast<float>(in.v[k]), max) * inv_sum);
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    } else {
      yr[c] = static_cast<T>(exp_shifted(static_cast<float>(xr[c]), max) * inv_sum);
    }
  }
}

// The register kernel with the fewest pieces per thread (a power of two up to MAX_PACKS) that hold the row.
template <typename T, int GROUP, int PACKS>
void launch_regs(int64_t packs_needed, unsigned blocks, cudaStream_t stream, const T* x, T* y, int64_t n_rows,
                 int64_t n_cols, int64_t x_stride) {
  if constexpr (PACKS < MAX_PACKS) {
    if (packs_needed > PACKS)
      return launch_regs<T, GROUP, PACKS * 2>(packs_needed, blocks, stream, x, y, n_rows, n_cols, x_stride);
  }
  softmax_regs_kernel<T, GROUP, PACKS><<<blocks, block_threads<GROUP>(), 0, stream>>>(x, y, n_rows, n_cols, x_stride);
}

template <typename T, int GROUP>
void launch_rows(bool vectorized, cudaStream_t stream, const T* x, T* y, int64_t n_rows, int64_t n_cols,
                 int64_t x_stride) {
  constexpr int V = 16 / sizeof(T), ROWS = block_threads<GROUP>() / GROUP;
  const int64_t blocks = (n_rows + ROWS - 1) / ROWS;
  TORCH_CHECK(blocks < (1LL << 31), "softmax_rows: too many rows");
  const int64_t packs_needed = (n_cols + (int64_t)GROUP * V - 1) / ((int64_t)GROUP * V);
  if (vectorized && packs_needed <= MAX_PACKS)
    launch_regs<T, GROUP, 1>(packs_needed, (unsigned)blocks, stream, x, y, n_rows, n_cols, x_stride);
  else
    softmax_loop_kernel<T, GROUP><<<(unsigned)blocks, block_threads<GROUP>(), 0, stream>>>(x, y, n_rows, n_cols,
                                                                                         x_stride, vectorized);
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
    // A warp per row while the row fits a warp's registers (or cannot be vectorized anyway).
    const bool warp_fits = !vectorized || n_cols <= (int64_t)WARP * V * MAX_PACKS;
    if (n_cols <= WARP_ROW_MAX_N && warp_fits)
      launch_rows<scalar_t, WARP>(vectorized, stream, xp, yp, n_rows, n_cols, x.stride(0));
    else
      launch_rows<scalar_t, BLOCK_THREADS>(vectorized, stream, xp, yp, n_rows, n_cols, x.stride(0));
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
