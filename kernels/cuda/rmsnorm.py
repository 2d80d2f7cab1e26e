"""RMSNorm starter in CUDA C++: over the last dimension or dim 1, statistics in float32.

Over the last dimension, a group of threads normalizes one row: a warp per row for rows up to
WARP_ROW_MAX_N elements (ROWS_PER_BLOCK rows to a block, so short rows still fill the machine),
else a block of 128 to MAX_BLOCK_THREADS threads: the fewest that hold the row in ROW_PACKS 16-byte
pieces per thread (on an H100, a fixed 256 threads reached 0.81 of copy bandwidth on 1024 rows of
16384, 512 reached 0.96 there but 0.77 on rows of 2048). Where the row fits in the group's registers (up to
MAX_PACKS 16-byte pieces per thread) and its stride and every pointer are 16-byte aligned, it is
read from memory once and kept as floats for the write (the first version read it twice; the
second read, from the cache, held float32 to 0.70 of copy bandwidth). Otherwise the row is read
twice, 16 bytes at a time where aligned, else one element at a time.

Over dim 1 of x (B, C, ...), x is viewed as (B, C, I). Where I is a multiple of 16 bytes' worth of
elements, a thread owns a 16-byte vector of adjacent positions and CHANNEL_REGS of their channels,
the threads of a warp that share a vector split its C channels among them and add their sums of
squares with shuffles, and every pack stays in registers until the write: x is read once, 16 bytes
at a time (the first version, one thread per position walking all C channels one element at a
time, reached 0.45-0.62 of copy bandwidth on an H100). Otherwise, or past 32 * CHANNEL_REGS
channels, one thread per position walks its channels and reads x twice.
"""

import torch

from autokernel.judge.cuda_build import load_cuda

KERNEL_TYPE = "rmsnorm"
BACKEND = "cuda"

# Tunable parameters (the built-in search agent edits this dict and nothing else); each becomes a
# #define in CUDA_SOURCE, so a change is a new build.
# MAX_BLOCK_THREADS, ROW_PACKS: for rows longer than WARP_ROW_MAX_N, the fewest threads (128 up to
# MAX_BLOCK_THREADS) that take the row in ROW_PACKS 16-byte pieces each.
# ROWS_PER_BLOCK: rows (one warp each) per block for short rows.
# CHANNEL_THREADS: threads per block over dim 1.
# MAX_PACKS: 16-byte pieces of a row a thread holds in registers; CHANNEL_REGS: the channels (dim 1)
# of its position vector a thread holds in registers (0: always the read-twice kernel).
TUNABLES = {"MAX_BLOCK_THREADS": 1024, "ROW_PACKS": 4, "WARP_ROW_MAX_N": 1024, "ROWS_PER_BLOCK": 8,
            "CHANNEL_THREADS": 128, "MAX_PACKS": 8, "CHANNEL_REGS": 4}
# The values the search agent may try for each tunable.
TUNABLE_CHOICES = {"MAX_BLOCK_THREADS": [256, 512, 1024], "ROW_PACKS": [1, 2, 4, 8],
                   "WARP_ROW_MAX_N": [0, 256, 512, 1024, 2048],
                   "ROWS_PER_BLOCK": [1, 2, 4, 8, 16], "CHANNEL_THREADS": [64, 128, 256, 512],
                   "MAX_PACKS": [2, 4, 8, 16], "CHANNEL_REGS": [0, 4, 8, 16]}

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

// Threads per block of a kernel whose groups are GROUP threads: a warp per row packs ROWS_PER_BLOCK rows.
template <int GROUP> constexpr int block_threads() { return GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP; }

// The row in registers: PACKS 16-byte pieces per thread, read once. Needs 16-byte aligned rows.
template <typename T, int GROUP, int PACKS>
__global__ void __launch_bounds__(GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP) rmsnorm_regs_kernel(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int64_t n_rows, int64_t n_cols,
    int64_t x_stride, float eps) {
  __shared__ float scratch[WARP];
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
  if (row >= n_rows) return;            // a whole group leaves together
  const int t = threadIdx.x % GROUP;
  const T* xr = x + row * x_stride;
  T* yr = y + row * n_cols;
  constexpr int V = 16 / sizeof(T);
  float v[PACKS][V];
  float sum_sq = 0.f;
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = ((int64_t)p * GROUP + t) * V;
    if (c < n_cols) {
      const Pack<T> in = *reinterpret_cast<const Pack<T>*>(xr + c);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        v[p][k] = static_cast<float>(in.v[k]);
        sum_sq += v[p][k] * v[p][k];
      }
    }
  }
  const float inv_rms = rsqrtf(group_sum<GROUP>(sum_sq, scratch) / (float)n_cols + eps);
#pragma unroll
  for (int p = 0; p < PACKS; ++p) {
    const int64_t c = ((int64_t)p * GROUP + t) * V;
    if (c < n_cols) {
      const Pack<T> q = *reinterpret_cast<const Pack<T>*>(w + c);
      Pack<T> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = static_cast<T>(v[p][k] * inv_rms * static_cast<float>(q.v[k]));
      *reinterpret_cast<Pack<T>*>(yr + c) = out;
    }
  }
}

// Rows too long for the registers, or not 16-byte aligned: the row is read twice.
template <typename T, int GROUP>
__global__ void __launch_bounds__(GROUP == WARP ? WARP * ROWS_PER_BLOCK : GROUP) rmsnorm_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
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

// x and y contiguous (outer, C, I) with I a multiple of V = 16 / sizeof(T): a thread owns V adjacent positions
// (one 16-byte pack per channel) and CPT of their channels, G = 32 / PV threads of a warp split the C channels, so
// every channel's pack stays in registers between the sum of squares and the write (x is read once). The G
// threads of a position vector are lanes PV apart and add their sums of squares with shuffles; the PV position
// vectors of a warp are adjacent in memory, so each load instruction reads PV * 16 contiguous bytes per channel.
template <typename T, int CPT, int PV>
__global__ void __launch_bounds__(CHANNEL_THREADS) rmsnorm_channels_vec_kernel(
    const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int64_t n_vectors, int64_t n_channels,
    int64_t n_inner, float eps) {
  constexpr int V = 16 / sizeof(T), G = WARP / PV;
  const int lane = threadIdx.x % WARP, g = lane / PV;
  const int64_t vec = ((int64_t)blockIdx.x * (CHANNEL_THREADS / WARP) + threadIdx.x / WARP) * PV + lane % PV;
  const bool live = vec < n_vectors;      // dead lanes still shuffle, so the whole warp stays in step
  const int64_t pos = live ? vec * V : 0;
  const int64_t base = (pos / n_inner) * n_channels * n_inner + pos % n_inner;
  Pack<T> packs[CPT];
  float sum_sq[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum_sq[j] = 0.f;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const int64_t c = (int64_t)g * CPT + k;
    if (live && c < n_channels) {
      packs[k] = *reinterpret_cast<const Pack<T>*>(x + base + c * n_inner);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float f = static_cast<float>(packs[k].v[j]);
        sum_sq[j] += f * f;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    for (int offset = PV; offset < WARP; offset *= 2) sum_sq[j] += __shfl_xor_sync(0xffffffffu, sum_sq[j], offset);
    sum_sq[j] = rsqrtf(sum_sq[j] / (float)n_channels + eps);
  }
  if (!live) return;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    const int64_t c = (int64_t)g * CPT + k;
    if (c < n_channels) {
      const float wc = static_cast<float>(w[c]);
      Pack<T> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = static_cast<T>(static_cast<float>(packs[k].v[j]) * sum_sq[j] * wc);
      *reinterpret_cast<Pack<T>*>(y + base + c * n_inner) = out;
    }
  }
  (void)G;
}

// The vectorized channel kernel with the most position vectors per warp whose G = 32 / PV threads hold all C channels.
template <typename T, int PV>
void launch_channels_vec(cudaStream_t stream, const T* x, const T* w, T* y, int64_t n_vectors, int64_t n_channels,
                         int64_t n_inner, float eps) {
  constexpr int CPT = CHANNEL_REGS > 0 ? CHANNEL_REGS : 1;
  if constexpr (PV > 1) {
    if ((int64_t)(WARP / PV) * CPT < n_channels)
      return launch_channels_vec<T, PV / 2>(stream, x, w, y, n_vectors, n_channels, n_inner, eps);
  }
  const int64_t per_block = (int64_t)(CHANNEL_THREADS / WARP) * PV;
  const int64_t blocks = (n_vectors + per_block - 1) / per_block;
  TORCH_CHECK(blocks < (1LL << 31), "rmsnorm_channels: too many positions");
  rmsnorm_channels_vec_kernel<T, CPT, PV><<<(unsigned)blocks, CHANNEL_THREADS, 0, stream>>>(
      x, w, y, n_vectors, n_channels, n_inner, eps);
}

// The same for any C: x is read twice.
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

// The register kernel with the fewest pieces per thread (a power of two up to MAX_PACKS) that hold the row.
template <typename T, int GROUP, int PACKS>
void launch_regs(int64_t packs_needed, unsigned blocks, cudaStream_t stream, const T* x, const T* w, T* y,
                 int64_t n_rows, int64_t n_cols, int64_t x_stride, float eps) {
  if constexpr (PACKS < MAX_PACKS) {
    if (packs_needed > PACKS)
      return launch_regs<T, GROUP, PACKS * 2>(packs_needed, blocks, stream, x, w, y, n_rows, n_cols, x_stride, eps);
  }
  rmsnorm_regs_kernel<T, GROUP, PACKS><<<blocks, block_threads<GROUP>(), 0, stream>>>(x, w, y, n_rows, n_cols,
                                                                                     x_stride, eps);
}

template <typename T, int GROUP>
void launch_rows(bool vectorized, cudaStream_t stream, const T* x, const T* w, T* y, int64_t n_rows, int64_t n_cols,
                 int64_t x_stride, float eps) {
  constexpr int V = 16 / sizeof(T), ROWS = block_threads<GROUP>() / GROUP;
  const int64_t blocks = (n_rows + ROWS - 1) / ROWS;
  TORCH_CHECK(blocks < (1LL << 31), "rmsnorm_rows: too many rows");
  const int64_t packs_needed = (n_cols + (int64_t)GROUP * V - 1) / ((int64_t)GROUP * V);
  if (vectorized && packs_needed <= MAX_PACKS)
    launch_regs<T, GROUP, 1>(packs_needed, (unsigned)blocks, stream, x, w, y, n_rows, n_cols, x_stride, eps);
  else
    rmsnorm_rows_kernel<T, GROUP><<<(unsigned)blocks, block_threads<GROUP>(), 0, stream>>>(
        x, w, y, n_rows, n_cols, x_stride, eps, vectorized);
}

// Rows longer than a warp's: the fewest threads, from GROUP up to MAX_BLOCK_THREADS, that take the row in
// ROW_PACKS 16-byte pieces each.
template <typename T, int GROUP>
void launch_block_rows(bool vectorized, cudaStream_t stream, const T* x, const T* w, T* y, int64_t n_rows,
                       int64_t n_cols, int64_t x_stride, float eps) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (GROUP < MAX_BLOCK_THREADS) {
    if (n_cols > (int64_t)GROUP * V * ROW_PACKS)
      return launch_block_rows<T, GROUP * 2>(vectorized, stream, x, w, y, n_rows, n_cols, x_stride, eps);
  }
  launch_rows<T, GROUP>(vectorized, stream, x, w, y, n_rows, n_cols, x_stride, eps);
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
    if (n_cols <= WARP_ROW_MAX_N)
      launch_rows<scalar_t, WARP>(vectorized, stream, xp, wp, yp, n_rows, n_cols, x.stride(0), (float)eps);
    else
      launch_block_rows<scalar_t, 128>(vectorized, stream, xp, wp, yp, n_rows, n_cols, x.stride(0), (float)eps);
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
    const auto* xp = x.data_ptr<scalar_t>();
    const auto* wp = weight.data_ptr<scalar_t>();
    auto* yp = y.data_ptr<scalar_t>();
    constexpr int V = 16 / sizeof(scalar_t);
    const bool vectorized = x.size(2) % V == 0 && aligned16(xp) && aligned16(yp);
    if (CHANNEL_REGS > 0 && vectorized && x.size(1) <= (int64_t)WARP * CHANNEL_REGS)
      launch_channels_vec<scalar_t, WARP>(stream, xp, wp, yp, n_positions / V, x.size(1), x.size(2), (float)eps);
    else
      rmsnorm_channels_kernel<scalar_t><<<(unsigned)blocks, CHANNEL_THREADS, 0, stream>>>(
          xp, wp, yp, n_positions, x.size(1), x.size(2), (float)eps);
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
